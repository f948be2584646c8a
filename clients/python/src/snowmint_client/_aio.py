"""The asyncio client."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio

from ._core import (
    DEFAULT_TIMEOUT,
    REFILL_PAUSE,
    BufferConfig,
    BufferState,
    ClientClosedError,
    Rotation,
    UnavailableError,
    channel_targets,
)
from ._proto import snowmint_pb2 as pb
from ._proto.snowmint_pb2_grpc import IdServiceStub

T = TypeVar("T")


class AsyncClient:
    """The asyncio twin of :class:`snowmint_client.Client`, with the same failover, deadlines
    and buffer; refills run as tasks. Create it, use it and close it on one event loop (``async
    with AsyncClient(...) as client``)."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        attempts: int | None = None,
        buffer: BufferConfig | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        targets = channel_targets(endpoints, credentials)
        self._rotation = Rotation(len(targets), timeout, attempts)
        self._channels = [
            grpc.aio.insecure_channel(target, options)
            if creds is None
            else grpc.aio.secure_channel(target, creds, options)
            for target, creds in targets
        ]
        self._stubs = [IdServiceStub(channel) for channel in self._channels]
        self._closed = False
        self._buffer = None if buffer is None else BufferState(buffer)
        self._refills: set[asyncio.Task[None]] = set()
        # Set, and replaced by a fresh event, whenever a refill ends.
        self._filled = asyncio.Event()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def next_id(self, *, timeout: float | None = None) -> int:
        """One new ID: from the buffer when the client has one, otherwise from a NextId call.
        ``timeout`` bounds the whole call in seconds, failover included."""
        if self._buffer is not None:
            return await self._next_buffered(self._buffer, timeout)

        async def next_id(stub: IdServiceStub, t: float) -> int:
            return int((await stub.NextId(pb.NextIdRequest(), timeout=t)).id)

        return await self._call(next_id, timeout)

    async def batch(self, n: int, *, timeout: float | None = None) -> list[int]:
        """``n`` new IDs, strictly increasing, from one server in one BatchIds call; never from
        the buffer. Other than n in 1 to the server's maximum batch is INVALID_ARGUMENT."""

        async def batch(stub: IdServiceStub, t: float) -> list[int]:
            return [int(id) for id in (await stub.BatchIds(pb.BatchIdsRequest(count=n), timeout=t)).ids]

        return await self._call(batch, timeout)

    async def close(self) -> None:
        """Cancels the refills and closes the connections. Calls after it raise
        :class:`ClientClosedError`."""
        if self._closed:
            return
        self._closed = True
        self._wake()
        for task in self._refills:
            task.cancel()
        await asyncio.gather(*self._refills, return_exceptions=True)
        for channel in self._channels:
            await channel.close()

    async def _call(self, do: Callable[[IdServiceStub, float], Awaitable[T]], timeout: float | None) -> T:
        if self._closed:
            raise ClientClosedError("the client is closed")
        call = self._rotation.start(timeout)
        while True:
            index, attempt_timeout = call.next_attempt()
            try:
                return await do(self._stubs[index], attempt_timeout)
            except grpc.RpcError as error:
                pause = call.failed(index, error)
            if pause:
                await asyncio.sleep(pause)

    def _wake(self) -> None:
        self._filled.set()
        self._filled = asyncio.Event()

    def _start_refills(self, buffer: BufferState) -> None:
        for _ in range(buffer.refills_to_start()):
            task = asyncio.create_task(self._refill(buffer))
            self._refills.add(task)
            task.add_done_callback(self._refills.discard)

    async def _next_buffered(self, buffer: BufferState, timeout: float | None) -> int:
        wait = timeout if timeout is not None else self._rotation.timeout * self._rotation.attempts
        deadline = None  # set on the first wait only: the common case never waits
        seen = buffer.failures
        while True:
            # No await between the pop and its return: on the event loop's one thread, an ID
            # is taken exactly once.
            if self._closed:
                raise ClientClosedError("the client is closed")
            now = time.monotonic()
            id = buffer.pop(now)
            self._start_refills(buffer)
            if id is not None:
                return id
            if buffer.failures != seen and buffer.last_error is not None:
                raise buffer.last_error
            if deadline is None:
                deadline = now + wait
            remaining = deadline - now
            if remaining <= 0:
                raise UnavailableError(f"no IDs arrived within {wait:g} s")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._filled.wait(), remaining)

    async def _refill(self, buffer: BufferState) -> None:
        sent_at = time.monotonic()
        try:
            ids = await self.batch(buffer.config.batch)
        except asyncio.CancelledError:
            buffer.released()
            raise
        except Exception as error:  # every failure must reach the waiting callers
            buffer.failed(error)
            self._wake()
            try:
                await asyncio.sleep(REFILL_PAUSE)
            finally:
                buffer.released()
                self._wake()
            return
        buffer.filled(ids, sent_at)
        if not self._closed:
            self._start_refills(buffer)
        self._wake()
