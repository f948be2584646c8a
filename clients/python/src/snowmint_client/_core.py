"""What the blocking and the asyncio clients share: errors, settings, the failover policy
and the buffer's bookkeeping. Nothing here does I/O or waits."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import grpc

DEFAULT_TIMEOUT = 1.0
"""Seconds each attempt to one server may take unless the client says otherwise."""


class SnowmintError(Exception):
    """Base of the errors this package raises itself. Errors of the server other than
    refusals are raised as the ``grpc.RpcError`` they are."""


class UnavailableError(SnowmintError):
    """Every attempt was refused (UNAVAILABLE) or failed in transport, or no buffered IDs
    arrived in time. Retriable: the servers may mint again a moment later, and a refusal never
    means an ID was issued twice."""

    def __init__(self, message: str, last: grpc.RpcError | None = None) -> None:
        super().__init__(message)
        self.last = last
        """The last attempt's error, if any."""

    @property
    def code(self) -> grpc.StatusCode:
        """Always ``UNAVAILABLE``, as the servers said."""
        return grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(SnowmintError, grpc.RpcError):
    """The call's own ``timeout`` passed before an attempt could start. A ``grpc.RpcError``
    with code ``DEADLINE_EXCEEDED``, as the one gRPC raises when it passes during an attempt:
    an attempt with no time left is not made (gRPC may still complete one whose deadline is
    already now)."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self) -> str:
        return str(self)


class ClientClosedError(SnowmintError):
    """A call on a closed client."""


@dataclass(frozen=True)
class BufferConfig:
    """The local buffer of prefetched IDs. The defaults are the Rust client's."""

    batch: int = 4096
    """IDs per refill (one BatchIds call)."""
    low_water: int = 8192
    """A refill starts when the buffered IDs, counting refills under way, are at or below this."""
    max_refills: int = 3
    """Refills in flight at once, to keep up with heavy use."""
    max_age: float = 1.0
    """Seconds after which a buffered batch is dropped unused, so the IDs handed out stay close
    to the time they are used."""

    def __post_init__(self) -> None:
        if self.batch < 1 or self.low_water < 0 or self.max_refills < 1 or self.max_age <= 0:
            raise ValueError(f"invalid {self}: batch and max_refills must be at least 1, max_age positive")


def parse_endpoint(endpoint: str) -> tuple[str, bool]:
    """``host:port`` or ``http://host:port`` (plain text), ``https://host:port`` (TLS):
    the gRPC target and whether it uses TLS."""
    scheme, sep, rest = endpoint.partition("://")
    if not sep:
        scheme, rest = "http", endpoint
    if scheme not in ("http", "https") or not rest or "/" in rest:
        raise ValueError(f"invalid endpoint {endpoint!r}: want host:port, http://host:port or https://host:port")
    return rest, scheme == "https"


def channel_targets(
    endpoints: Iterable[str], credentials: grpc.ChannelCredentials | None
) -> list[tuple[str, grpc.ChannelCredentials | None]]:
    """Each endpoint's target and credentials (``None`` for plain text)."""
    targets = []
    for endpoint in endpoints:
        target, tls = parse_endpoint(endpoint)
        creds = credentials if credentials is not None else grpc.ssl_channel_credentials() if tls else None
        targets.append((target, creds))
    if not targets:
        raise ValueError("no endpoints given")
    return targets


class Rotation:
    """Which endpoint calls go to first, and the attempt policy. Thread-safe."""

    def __init__(self, endpoints: int, timeout: float, attempts: int | None) -> None:
        if timeout <= 0:
            raise ValueError(f"the timeout must be positive, got {timeout}")
        self.endpoints = endpoints
        self.timeout = timeout
        self.attempts = max(2, 2 * endpoints) if attempts is None else attempts
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        self._current = 0
        self._lock = threading.Lock()

    def start(self, timeout: float | None) -> Call:
        """A new call, bounded as a whole by ``timeout`` seconds when given."""
        return Call(self, None if timeout is None else time.monotonic() + timeout)

    def current(self) -> int:
        with self._lock:
            return self._current

    def move_on(self, index: int) -> None:
        """Moves on from endpoint ``index``, unless another call already did."""
        with self._lock:
            if self._current == index:
                self._current = (index + 1) % self.endpoints


class Call:
    """One call's attempts: where and with what deadline each goes, and what a failure means."""

    def __init__(self, rotation: Rotation, deadline: float | None) -> None:
        self._rotation = rotation
        self._deadline = deadline
        self._attempt = 0

    def next_attempt(self) -> tuple[int, float]:
        """The endpoint of the next attempt and its timeout in seconds: the client's timeout,
        or what is left of the call's own deadline when that is sooner."""
        timeout = self._rotation.timeout
        if self._deadline is not None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise DeadlineExceededError("the call's timeout passed")
            timeout = min(timeout, left)
        return self._rotation.current(), timeout

    def failed(self, index: int, error: grpc.RpcError) -> float:
        """Handles a failed attempt at endpoint ``index``: the seconds to wait before the next
        attempt, or raises the error as it is (one that fails over nowhere) or
        :class:`UnavailableError` (attempts used up)."""
        code = cast(grpc.Call, error).code()
        deadline_passed = self._deadline is not None and time.monotonic() >= self._deadline
        # With the call's own deadline still ahead, DEADLINE_EXCEEDED is the attempt's: the
        # server did not answer in time.
        if code != grpc.StatusCode.UNAVAILABLE and (code != grpc.StatusCode.DEADLINE_EXCEEDED or deadline_passed):
            raise error
        rotation = self._rotation
        rotation.move_on(index)
        attempt = self._attempt
        self._attempt += 1
        if self._attempt >= rotation.attempts:
            details = cast(grpc.Call, error).details()
            raise UnavailableError(
                f"every endpoint refused or failed after {rotation.attempts} attempts: {code.name}: {details}", error
            ) from error
        if self._attempt < rotation.endpoints:
            return 0.0
        # Every endpoint tried: back off a little before going round again.
        pause = 0.010 * (1 << min(attempt, 5))
        if self._deadline is not None:
            pause = min(pause, max(0.0, self._deadline - time.monotonic()))
        return pause


class _Fetched:
    __slots__ = ("at", "ids")

    def __init__(self, ids: Sequence[int], at: float) -> None:
        self.ids = deque(ids)
        self.at = at


class BufferState:
    """The buffer's bookkeeping. Not locked: the blocking client holds its lock around every
    use, the asyncio client uses it from the event loop only. An ID leaves it exactly once, in
    :meth:`pop`, so none is handed out twice."""

    def __init__(self, config: BufferConfig) -> None:
        self.config = config
        self._batches: deque[_Fetched] = deque()
        self._buffered = 0
        self._refilling = 0
        self.failures = 0
        """Refills that failed so far."""
        self.last_error: Exception | None = None

    def pop(self, now: float) -> int | None:
        """The next ID, first dropping every batch older than ``max_age``; None when empty."""
        while self._batches:
            front = self._batches[0]
            if front.ids and now - front.at <= self.config.max_age:
                self._buffered -= 1
                return front.ids.popleft()
            self._buffered -= len(front.ids)
            self._batches.popleft()
        return None

    def refills_to_start(self) -> int:
        """How many refills to start now, counted as under way: while the buffer, counting
        refills under way, is at or below the low-water mark, up to ``max_refills`` at once."""
        c = self.config
        started = 0
        while self._refilling < c.max_refills and self._buffered + self._refilling * c.batch <= c.low_water:
            self._refilling += 1
            started += 1
        return started

    def filled(self, ids: Sequence[int], sent_at: float) -> None:
        """A refill sent at monotonic time ``sent_at`` brought ``ids``: every one was minted
        after that, so their age counts from there."""
        self._refilling -= 1
        self._batches.append(_Fetched(ids, sent_at))
        self._buffered += len(ids)

    def failed(self, error: Exception) -> None:
        """A refill failed; it stays counted as under way until :meth:`released`."""
        self.failures += 1
        self.last_error = error

    def released(self) -> None:
        self._refilling -= 1


REFILL_PAUSE = 0.1
"""Seconds a failed refill keeps its place, so callers looping on next_id() do not hammer
servers that all failed."""
