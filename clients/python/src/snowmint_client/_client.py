"""The blocking client."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc

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


class Client:
    """A blocking client of one or several snowmint servers, safe to share between threads.

    Calls go to one endpoint and move to the next when a server refuses (UNAVAILABLE), cannot
    be reached, or does not answer within ``timeout`` seconds; every other error is raised as
    the ``grpc.RpcError`` it is. When every attempt fails, :class:`UnavailableError` (retriable)
    is raised. With ``buffer``, :meth:`next_id` hands out prefetched IDs, refilled by background
    threads. Use it as a context manager, or call :meth:`close`.

    ``endpoints`` are ``host:port``, ``http://host:port`` (plain text) or ``https://host:port``
    (TLS with the default roots); ``credentials`` makes every endpoint use those instead.
    ``attempts`` defaults to twice the number of endpoints, at least 2. ``options`` are gRPC
    channel options.
    """

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
            grpc.insecure_channel(target, options) if creds is None else grpc.secure_channel(target, creds, options)
            for target, creds in targets
        ]
        self._stubs = [IdServiceStub(channel) for channel in self._channels]
        self._closed = False
        self._closing = threading.Event()
        self._buffer: BufferState | None = None
        # _lock guards the buffer and _closed; _cond, on the same lock, is notified whenever a
        # refill ends. The hot path takes the plain lock: a Condition's own `with` costs more.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        if buffer is not None:
            self._buffer = BufferState(buffer)
            self._refills = ThreadPoolExecutor(buffer.max_refills, thread_name_prefix="snowmint-refill")

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def next_id(self, *, timeout: float | None = None) -> int:
        """One new ID: from the buffer when the client has one, otherwise from a NextId call.
        ``timeout`` bounds the whole call in seconds, failover included."""
        if self._buffer is not None:
            return self._next_buffered(self._buffer, timeout)
        return self._call(lambda stub, t: int(stub.NextId(pb.NextIdRequest(), timeout=t).id), timeout)

    def batch(self, n: int, *, timeout: float | None = None) -> list[int]:
        """``n`` new IDs, strictly increasing, from one server in one BatchIds call; never from
        the buffer. ``n`` must be between 1 and the server's maximum batch (65,536 by default):
        the server answers INVALID_ARGUMENT otherwise, raised as it is."""
        return self._call(
            lambda stub, t: [int(id) for id in stub.BatchIds(pb.BatchIdsRequest(count=n), timeout=t).ids], timeout
        )

    def close(self) -> None:
        """Stops the refills and closes the connections. Calls after it raise
        :class:`ClientClosedError`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._closing.set()
        for channel in self._channels:
            channel.close()
        if self._buffer is not None:
            self._refills.shutdown(wait=True)

    def _call(self, do: Callable[[IdServiceStub, float], T], timeout: float | None) -> T:
        if self._closed:
            raise ClientClosedError("the client is closed")
        call = self._rotation.start(timeout)
        while True:
            index, attempt_timeout = call.next_attempt()
            try:
                return do(self._stubs[index], attempt_timeout)
            except grpc.RpcError as error:
                pause = call.failed(index, error)
            if pause:
                time.sleep(pause)

    def _next_buffered(self, buffer: BufferState, timeout: float | None) -> int:
        wait = timeout if timeout is not None else self._rotation.timeout * self._rotation.attempts
        deadline = None  # set on the first wait only: the common case never waits
        with self._lock:
            seen = buffer.failures
            while True:
                if self._closed:
                    raise ClientClosedError("the client is closed")
                now = time.monotonic()
                id = buffer.pop(now)
                for _ in range(buffer.refills_to_start()):
                    self._refills.submit(self._refill, buffer)
                if id is not None:
                    return id
                if buffer.failures != seen and buffer.last_error is not None:
                    raise buffer.last_error
                if deadline is None:
                    deadline = now + wait
                remaining = deadline - now
                if remaining <= 0:
                    raise UnavailableError(f"no IDs arrived within {wait:g} s")
                self._cond.wait(remaining)

    def _refill(self, buffer: BufferState) -> None:
        sent_at = time.monotonic()
        try:
            ids = self.batch(buffer.config.batch)
        except Exception as error:  # every failure must reach the waiting callers
            with self._lock:
                buffer.failed(error)
                self._cond.notify_all()
            self._closing.wait(REFILL_PAUSE)
            with self._lock:
                buffer.released()
                self._cond.notify_all()
            return
        with self._lock:
            buffer.filled(ids, sent_at)
            if not self._closed:
                for _ in range(buffer.refills_to_start()):
                    self._refills.submit(self._refill, buffer)
            self._cond.notify_all()
