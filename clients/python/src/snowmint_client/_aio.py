"""The asyncio client."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio

from . import _wire
from ._core import (
    DEFAULT_TIMEOUT,
    BufferConfig,
    BufferState,
    ClientClosedError,
    DeadlineExceededError,
    Rotation,
    UnavailableError,
    channel_options,
    channel_targets,
    token_metadata,
)
from ._prefetch import SequenceBuffer, SequencePrefetch, check_sequence_prefetch, out_of_range

T = TypeVar("T")
_monotonic = time.monotonic

POPS_PER_YIELD = 1024
"""IDs a caller takes from the buffer between two turns it gives the event loop."""


class AsyncClient:
    """The asyncio twin of :class:`snowmint_client.Client`, with the same failover, deadlines,
    errors and buffer; refills run as tasks. Create it, use it and close it on one event loop
    (``async with AsyncClient(...) as client``). ``token`` is as the blocking client's: every
    attempt carries it, and quota refusals are waited out alike."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        attempts: int | None = None,
        buffer: BufferConfig | None = None,
        sequence_prefetch: int = 0,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
        token: str | None = None,
    ) -> None:
        self._metadata = token_metadata(token)
        per_refill = check_sequence_prefetch(sequence_prefetch)
        self._prefetch = SequencePrefetch(per_refill, asyncio.Lock) if per_refill else None
        targets = channel_targets(endpoints, credentials)
        self._rotation = Rotation(len(targets), timeout, attempts)
        merged = channel_options(options)
        self._channels = [
            grpc.aio.insecure_channel(target, merged)
            if creds is None
            else grpc.aio.secure_channel(target, creds, merged)
            for target, creds in targets
        ]
        self._next_id = [
            c.unary_unary(
                _wire.NEXT_ID, request_serializer=_wire.identity, response_deserializer=_wire.next_id_response
            )
            for c in self._channels
        ]
        self._batch_ids = [
            c.unary_unary(
                _wire.BATCH_IDS, request_serializer=_wire.identity, response_deserializer=_wire.batch_ids_response
            )
            for c in self._channels
        ]

        # The UUID and sequence calls' answers are read by the calls themselves, so that a
        # malformed one raises _wire.WireError (grpc would turn a deserializer's error into
        # INTERNAL, or None).
        def raw(path: str) -> list[Any]:
            return [
                c.unary_unary(path, request_serializer=_wire.identity, response_deserializer=_wire.identity)
                for c in self._channels
            ]

        self._next_uuid = raw(_wire.NEXT_UUID)
        self._batch_uuids = raw(_wire.BATCH_UUIDS)
        self._next_value = raw(_wire.NEXT_VALUE)
        self._batch_values = raw(_wire.BATCH_VALUES)
        self._closed = False
        self._buffer = None if buffer is None else BufferState(buffer, _monotonic())
        self._refills: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._pops = 0
        # Set, and replaced by a fresh event, whenever a refill ends.
        self._filled = asyncio.Event()
        # Set by close(): ends the pauses and quota waits of the calls under way.
        self._closing = asyncio.Event()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def next_id(self, *, timeout: float | None = None) -> int:
        """One new ID: from the buffer when the client has one, otherwise from a NextId call.
        ``timeout`` bounds the whole call in seconds, failover and waits included."""
        state = self._buffer
        if state is None:

            async def next_id(i: int, t: float) -> int:
                return int(await self._next_id[i](b"", timeout=t, metadata=self._metadata))

            return await self._call(next_id, timeout)
        # The fast path. No await between the pop and its return: on the event loop's one
        # thread, an ID is taken exactly once. An ID popped from a batch gone stale is dropped.
        front = state.front
        if front is not None:
            ids, stale_at = front
            try:
                id = ids.popleft()
            except IndexError:
                return await self._next_buffered(state, timeout)
            if _monotonic() >= stale_at:
                return await self._next_buffered(state, timeout)
            state.countdown -= 1
            if state.countdown <= 0:
                self._decide(state, _monotonic())
                # The refills just started run at the loop's next turn: give it one.
                await asyncio.sleep(0)
            else:
                self._pops += 1
                if self._pops >= POPS_PER_YIELD:
                    # A caller looping on ready IDs would never give the loop a turn: the
                    # refills under way would not be answered until the buffer runs dry.
                    self._pops = 0
                    await asyncio.sleep(0)
            return id
        return await self._next_buffered(state, timeout)

    async def batch(self, n: int, *, timeout: float | None = None) -> list[int]:
        """``n`` new IDs, strictly increasing, from one server in one BatchIds call (``n`` = 1
        too); never from the buffer. Other than n in 1 to the server's maximum batch is
        INVALID_ARGUMENT, raised as it is."""
        request = _wire.batch_ids_request(n)

        async def batch(i: int, t: float) -> list[int]:
            ids: list[int] = await self._batch_ids[i](request, timeout=t, metadata=self._metadata)
            return ids

        return await self._call(batch, timeout)

    async def next_uuid(self, *, timeout: float | None = None) -> uuid.UUID:
        """One new UUIDv7, from one NextUuid call (never buffered), made from one newly minted
        ID and above every UUID that server minted before. Failover, attempts and ``timeout``
        are those of :meth:`next_id`. An answer whose UUID is not 16 bytes raises
        :class:`WireError`."""
        request = _wire.next_uuid_request()

        async def next_uuid(i: int, t: float) -> uuid.UUID:
            return _wire.next_uuid_response(await self._next_uuid[i](request, timeout=t, metadata=self._metadata))

        return await self._call(next_uuid, timeout)

    async def batch_uuids(self, n: int, *, timeout: float | None = None) -> list[uuid.UUID]:
        """``n`` new UUIDv7s, strictly increasing, from one server in one BatchUuids call
        (``n`` = 1 too), as :meth:`batch` gets IDs: never buffered; other than n in 1 to the
        server's maximum batch is INVALID_ARGUMENT, raised as it is. An answer with a UUID that
        is not 16 bytes raises :class:`WireError`."""
        request = _wire.batch_uuids_request(n)

        async def batch_uuids(i: int, t: float) -> list[uuid.UUID]:
            return _wire.batch_uuids_response(await self._batch_uuids[i](request, timeout=t, metadata=self._metadata))

        return await self._call(batch_uuids, timeout)

    async def next_value(self, name: str, *, timeout: float | None = None) -> int:
        """The next value of the named sequence ``name``, as
        :meth:`Client.next_value <snowmint_client.Client.next_value>` gets it (from the
        sequence's buffer with ``sequence_prefetch``)."""
        if self._prefetch is None:
            return (await self._values(name, None, timeout))[0][0]
        sequence = self._prefetch.sequence(name)
        if sequence.ordered:
            return await self._one_value(sequence, name, timeout)
        deadline = None if timeout is None else _monotonic() + timeout
        try:
            await asyncio.wait_for(sequence.lock.acquire(), timeout)
        except TimeoutError:
            raise DeadlineExceededError("the call's timeout passed waiting for another caller's refill") from None
        try:
            if self._closed:
                raise ClientClosedError("the client is closed")
            if sequence.values:
                return sequence.values.popleft()
            left = None if deadline is None else deadline - _monotonic()
            if sequence.ordered is not False:
                return await self._one_value(sequence, name, left)
            try:
                values, ordered = await self._values(name, self._prefetch.per_refill, left)
            except grpc.RpcError as error:
                if out_of_range(error):
                    left = None if deadline is None else deadline - _monotonic()
                    return await self._one_value(sequence, name, left)
                sequence.failed(error)
                raise
            return sequence.kept(values, ordered)
        finally:
            sequence.lock.release()

    async def _one_value(self, sequence: SequenceBuffer, name: str, timeout: float | None) -> int:
        try:
            values, ordered = await self._values(name, None, timeout)
        except grpc.RpcError as error:
            sequence.failed(error)
            raise
        sequence.learn(ordered)
        return values[0]

    async def batch_values(self, name: str, n: int, *, timeout: float | None = None) -> list[int]:
        """``n`` values of the named sequence ``name``, increasing, from one BatchValues call, as
        :meth:`Client.batch_values <snowmint_client.Client.batch_values>` gets them."""
        return (await self._values(name, n, timeout))[0]

    async def _values(self, name: str, n: int | None, timeout: float | None) -> tuple[list[int], bool]:
        """One NextValue (``n`` None) or BatchValues call: its values, and whether the sequence
        is ordered."""
        if n is None:
            request = _wire.next_value_request(name)

            async def one(i: int, t: float) -> tuple[list[int], bool]:
                answer = await self._next_value[i](request, timeout=t, metadata=self._metadata)
                return [_wire.next_value_response(answer)], _wire.ordered(answer)

            return await self._call(one, timeout)
        request = _wire.batch_values_request(name, n)

        async def batch_values(i: int, t: float) -> tuple[list[int], bool]:
            answer = await self._batch_values[i](request, timeout=t, metadata=self._metadata)
            values = _wire.batch_values_response(answer)
            if len(values) != n:
                raise _wire.WireError(f"asked the server for {n} values, it answered {len(values)}")
            return values, _wire.ordered(answer)

        return await self._call(batch_values, timeout)

    async def close(self) -> None:
        """Ends the client at once: the buffer stops refilling, every call waiting on the
        client raises :class:`ClientClosedError`, the connections close, and every later call
        raises it too. Buffered IDs and sequence values are dropped, never handed out (a gap).
        Calling it again does
        nothing."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        if self._buffer is not None:
            self._buffer.close()
        if self._timer is not None:
            self._timer.cancel()
        self._wake()
        for task in self._refills:
            task.cancel()
        await asyncio.gather(*self._refills, return_exceptions=True)
        for channel in self._channels:
            await channel.close()

    async def _call(self, do: Callable[[int, float], Awaitable[T]], timeout: float | None) -> T:
        if self._closed:
            raise ClientClosedError("the client is closed")
        call = self._rotation.start(timeout, _monotonic())
        while True:
            index, attempt_timeout = call.next_attempt(_monotonic())
            try:
                return await do(index, attempt_timeout)
            except grpc.RpcError as error:
                if self._closed:
                    raise ClientClosedError("the client was closed during the call") from error
                pause = call.failed(index, error, _monotonic(), _wire.quota_delay(error))
            except asyncio.CancelledError:
                if self._closed:  # close() cut the call; a cancellation of the caller's goes on
                    raise ClientClosedError("the client was closed during the call") from None
                raise
            if pause:
                # A pause, or a quota wait; close() ends it at once, as a cancellation does.
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), pause)
                if self._closed:
                    raise ClientClosedError("the client was closed during the call")

    def _wake(self) -> None:
        self._filled.set()
        self._filled = asyncio.Event()

    def _decide(self, state: BufferState, now: float) -> None:
        """Decides, starts the refills and sets the timer of the next decision."""
        refills, wake_at = state.decide(now, self._closed)
        for n in refills:
            task = asyncio.ensure_future(self._refill(state, n, now))
            self._refills.add(task)
            task.add_done_callback(self._refills.discard)
        if wake_at is not None and not self._closed and (self._timer is None or wake_at < self._timer_at):
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = wake_at
            self._timer = asyncio.get_running_loop().call_later(max(0.0, wake_at - now), self._on_timer, state)

    def _on_timer(self, state: BufferState) -> None:
        self._timer = None
        self._decide(state, _monotonic())

    async def _next_buffered(self, state: BufferState, timeout: float | None) -> int:
        wait = timeout if timeout is not None else self._rotation.timeout * self._rotation.attempts
        deadline = None  # set on the first wait only: the common case never waits
        seen = state.failures
        try:
            while True:
                if self._closed:
                    raise ClientClosedError("the client is closed")
                now = _monotonic()
                id = state.pop(now)
                if id is not None:
                    if state.countdown <= 0:
                        self._decide(state, now)
                    return id
                if state.failures != seen and state.last_error is not None:
                    raise state.last_error
                if deadline is None:
                    deadline = now + wait
                    state.waiting += 1
                self._decide(state, now)
                remaining = deadline - now
                if remaining <= 0:
                    if timeout is not None:
                        raise DeadlineExceededError("the call's timeout passed with the buffer empty")
                    raise UnavailableError(f"no IDs arrived within {wait:g} s")
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._filled.wait(), remaining)
        finally:
            if deadline is not None:
                state.waiting -= 1

    async def _refill(self, state: BufferState, n: int, sent: float) -> None:
        ids: list[int] | None = None
        error: Exception | None = None
        try:
            ids = await self.batch(n)
        except asyncio.CancelledError:
            return
        except Exception as failure:  # every failure must reach the waiting callers
            error = failure
        if self._closed:
            return
        now = _monotonic()
        if state.ended(n, sent, ids, error, now):
            self._wake()
        self._decide(state, now)
