"""The blocking client."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc

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
from ._prefetch import SequencePrefetch, check_sequence_prefetch, out_of_range

T = TypeVar("T")
_monotonic = time.monotonic


class Client:
    """A blocking client of one or several snowmint servers, safe to share between threads.

    Calls go to one endpoint and move to the next when a server refuses (UNAVAILABLE), cannot
    be reached, or does not answer within ``timeout`` seconds; every other error is raised as
    the ``grpc.RpcError`` it is. When every attempt fails, :class:`UnavailableError` (retriable)
    is raised; when a call's own ``timeout`` passes, :class:`DeadlineExceededError`. With
    ``buffer``, :meth:`next_id` hands out prefetched IDs, refilled by background threads at the
    rate they are used. :meth:`next_uuid` and :meth:`batch_uuids` mint UUIDv7s, never buffered.
    With ``sequence_prefetch`` n (0, off, to 65,536), :meth:`next_value` hands out values of
    each unordered named sequence fetched n at a time by one BatchValues.
    Use it as a context manager, or call :meth:`close`.

    ``endpoints`` is a list of ``host:port``, ``http://host:port`` (plain text) or
    ``https://host:port`` (TLS, verified with the default roots, or with ``credentials``, e.g.
    ``grpc.ssl_channel_credentials(ca, key, certificate)`` for a CA and a client certificate).
    ``attempts`` defaults to twice the number of endpoints, at least 2. ``options`` are gRPC
    channel options. With ``token``, every attempt carries ``authorization: Bearer <token>``
    (1 to 4,096 visible ASCII characters, else ``ValueError``; over plain text it crosses the
    network as it is). A refusal over the tenant's quota (RESOURCE_EXHAUSTED with a RetryInfo)
    is waited out and tried again on the same endpoint when the call has an attempt left and
    its ``timeout`` is further away; otherwise it is raised as it is.
    """

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
        self._prefetch = SequencePrefetch(per_refill, threading.Lock) if per_refill else None
        targets = channel_targets(endpoints, credentials)
        self._rotation = Rotation(len(targets), timeout, attempts)
        merged = channel_options(options)
        self._channels = [
            grpc.insecure_channel(target, merged) if creds is None else grpc.secure_channel(target, creds, merged)
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
        # Set by close(): ends the pauses and quota waits of the calls under way.
        self._closing = threading.Event()
        # _lock guards the buffer (but its front, which callers pop from without it) and
        # _closed; _cond, on the same lock, is notified whenever a refill ends.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._buffer: BufferState | None = None
        self._timer: threading.Timer | None = None
        self._timer_at = 0.0
        if buffer is not None:
            self._buffer = BufferState(buffer, _monotonic())
            self._refills = ThreadPoolExecutor(buffer.max_refills, thread_name_prefix="snowmint-refill")

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def next_id(self, *, timeout: float | None = None) -> int:
        """One new ID: from the buffer when the client has one, otherwise from a NextId call.
        ``timeout`` bounds the whole call in seconds, failover and waits included."""
        state = self._buffer
        if state is None:
            return self._call(lambda i, t: int(self._next_id[i](b"", timeout=t, metadata=self._metadata)), timeout)
        # The fast path: no lock. popleft() hands each ID out once even between threads; the
        # ID is kept only while its batch is not stale.
        front = state.front
        if front is not None:
            try:
                id = front[0].popleft()
            except IndexError:
                pass
            else:
                if _monotonic() < front[1]:
                    state.countdown -= 1
                    if state.countdown <= 0:
                        with self._lock:
                            self._decide(state, _monotonic())
                    return id
        return self._next_buffered(state, timeout)

    def batch(self, n: int, *, timeout: float | None = None) -> list[int]:
        """``n`` new IDs, strictly increasing, from one server in one BatchIds call (``n`` = 1
        too); never from the buffer. ``n`` must be between 1 and the server's maximum batch
        (65,536 by default): the server answers INVALID_ARGUMENT otherwise, raised as it is."""
        request = _wire.batch_ids_request(n)
        return self._call(lambda i, t: self._batch_ids[i](request, timeout=t, metadata=self._metadata), timeout)

    def next_uuid(self, *, timeout: float | None = None) -> uuid.UUID:
        """One new UUIDv7, from one NextUuid call (never buffered), made from one newly minted
        ID and above every UUID that server minted before. Failover, attempts and ``timeout``
        are those of :meth:`next_id`. An answer whose UUID is not 16 bytes raises
        :class:`WireError`."""
        request = _wire.next_uuid_request()
        return self._call(
            lambda i, t: _wire.next_uuid_response(self._next_uuid[i](request, timeout=t, metadata=self._metadata)),
            timeout,
        )

    def batch_uuids(self, n: int, *, timeout: float | None = None) -> list[uuid.UUID]:
        """``n`` new UUIDv7s, strictly increasing, from one server in one BatchUuids call
        (``n`` = 1 too), as :meth:`batch` gets IDs: never buffered, and ``n`` must be between 1
        and the server's maximum batch (65,536 by default), else the server's INVALID_ARGUMENT
        is raised as it is. An answer with a UUID that is not 16 bytes raises
        :class:`WireError`."""
        request = _wire.batch_uuids_request(n)
        return self._call(
            lambda i, t: _wire.batch_uuids_response(self._batch_uuids[i](request, timeout=t, metadata=self._metadata)),
            timeout,
        )

    def next_value(self, name: str, *, timeout: float | None = None) -> int:
        """The next value of the named sequence ``name``: positive, never issued twice. One
        NextValue call; with ``sequence_prefetch``, from the sequence's buffer when it holds one
        (an unordered sequence's buffer is refilled by one BatchValues, shared by the callers
        waiting; an ordered sequence is never buffered). Failover, attempts and ``timeout`` are
        those of :meth:`next_id`; NOT_FOUND (no such sequence) and OUT_OF_RANGE (used up) are
        raised as they are. An answer that is not a positive value raises :class:`WireError`."""
        if self._prefetch is None:
            return self._values(name, None, timeout)[0][0]
        sequence = self._prefetch.sequence(name)
        if sequence.ordered:
            return self._one_value(sequence, name, timeout)
        deadline = None if timeout is None else _monotonic() + timeout
        if not sequence.lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            raise DeadlineExceededError("the call's timeout passed waiting for another caller's refill")
        try:
            if self._closed:
                raise ClientClosedError("the client is closed")
            if sequence.values:
                return sequence.values.popleft()
            left = None if deadline is None else deadline - _monotonic()
            if sequence.ordered is not False:
                return self._one_value(sequence, name, left)
            try:
                values, ordered = self._values(name, self._prefetch.per_refill, left)
            except grpc.RpcError as error:
                if out_of_range(error):
                    return self._one_value(sequence, name, None if deadline is None else deadline - _monotonic())
                sequence.failed(error)
                raise
            return sequence.kept(values, ordered)
        finally:
            sequence.lock.release()

    def _one_value(self, sequence: Any, name: str, timeout: float | None) -> int:
        try:
            values, ordered = self._values(name, None, timeout)
        except grpc.RpcError as error:
            sequence.failed(error)
            raise
        sequence.learn(ordered)
        return values[0]

    def batch_values(self, name: str, n: int, *, timeout: float | None = None) -> list[int]:
        """``n`` values of the named sequence ``name``, increasing, from one server in one
        BatchValues call, as :meth:`batch` gets IDs; never from the sequence's buffer. An answer
        of another count, or of values not positive and increasing, raises :class:`WireError`."""
        return self._values(name, n, timeout)[0]

    def _values(self, name: str, n: int | None, timeout: float | None) -> tuple[list[int], bool]:
        """One NextValue (``n`` None) or BatchValues call: its values, and whether the sequence
        is ordered."""
        if n is None:
            request = _wire.next_value_request(name)

            def one(i: int, t: float) -> tuple[list[int], bool]:
                answer = self._next_value[i](request, timeout=t, metadata=self._metadata)
                return [_wire.next_value_response(answer)], _wire.ordered(answer)

            return self._call(one, timeout)
        request = _wire.batch_values_request(name, n)

        def call(i: int, t: float) -> tuple[list[int], bool]:
            answer = self._batch_values[i](request, timeout=t, metadata=self._metadata)
            values = _wire.batch_values_response(answer)
            if len(values) != n:
                raise _wire.WireError(f"asked the server for {n} values, it answered {len(values)}")
            return values, _wire.ordered(answer)

        return self._call(call, timeout)

    def close(self) -> None:
        """Ends the client at once: the buffer stops refilling, every call waiting on the
        client (on an empty buffer, or in an attempt on a server) raises
        :class:`ClientClosedError`, the connections close, and every later call raises it too.
        Buffered IDs and sequence values are dropped, never handed out (a gap). Calling it
        again does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._closing.set()
            if self._buffer is not None:
                self._buffer.close()
            if self._timer is not None:
                self._timer.cancel()
            self._cond.notify_all()
        for channel in self._channels:
            channel.close()
        if self._buffer is not None:
            self._refills.shutdown(wait=True)

    def _call(self, do: Callable[[int, float], T], timeout: float | None) -> T:
        if self._closed:
            raise ClientClosedError("the client is closed")
        call = self._rotation.start(timeout, _monotonic())
        while True:
            index, attempt_timeout = call.next_attempt(_monotonic())
            try:
                return do(index, attempt_timeout)
            except grpc.RpcError as error:
                if self._closed:
                    raise ClientClosedError("the client was closed during the call") from error
                pause = call.failed(index, error, _monotonic(), _wire.quota_delay(error))
            # A pause, or a quota wait; close() ends it at once.
            if pause and self._closing.wait(pause):
                raise ClientClosedError("the client was closed during the call")

    def _next_buffered(self, state: BufferState, timeout: float | None) -> int:
        wait = timeout if timeout is not None else self._rotation.timeout * self._rotation.attempts
        deadline = None  # set on the first wait only: the common case never waits
        with self._lock:
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
                    self._cond.wait(remaining)
            finally:
                if deadline is not None:
                    state.waiting -= 1

    def _decide(self, state: BufferState, now: float) -> None:
        """Decides, starts the refills and sets the timer of the next decision. Holds the lock."""
        refills, wake_at = state.decide(now, self._closed)
        for n in refills:
            self._refills.submit(self._refill, state, n, now)
        if wake_at is not None and not self._closed and (self._timer is None or wake_at < self._timer_at):
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = wake_at
            self._timer = threading.Timer(max(0.0, wake_at - now), self._on_timer, (state,))
            self._timer.daemon = True
            self._timer.start()

    def _on_timer(self, state: BufferState) -> None:
        with self._lock:
            self._timer = None
            self._decide(state, _monotonic())

    def _refill(self, state: BufferState, n: int, sent: float) -> None:
        ids: list[int] | None = None
        error: Exception | None = None
        try:
            ids = self.batch(n)
        except Exception as failure:  # every failure must reach the waiting callers
            error = failure
        with self._lock:
            if self._closed:
                return
            now = _monotonic()
            if state.ended(n, sent, ids, error, now):
                self._cond.notify_all()
            self._decide(state, now)
