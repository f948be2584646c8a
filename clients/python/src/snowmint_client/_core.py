"""What the blocking and the asyncio clients share: errors, settings, the failover policy
and the buffer's bookkeeping. Nothing here does I/O, waits or reads a clock: the time is an
argument, so tests drive the rules through simulated time."""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import grpc

DEFAULT_TIMEOUT = 1.0
"""Seconds each attempt to one server may take unless the client says otherwise."""

CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    # gRPC holds a connection that failed in a reconnect backoff (up to 120 s by default,
    # failing every call to it meanwhile); kept under half a second (plus a fifth of jitter),
    # a server that comes back is used again within a second.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
)
"""Channel options every channel gets, before the caller's own ``options``."""


class SnowmintError(Exception):
    """Base of the errors this package raises itself. Errors of the server other than
    refusals are raised as the ``grpc.RpcError`` they are."""


class UnavailableError(SnowmintError):
    """Every attempt failed over (refused, failed in transport, or past its own timeout), or
    no buffered IDs arrived in time. Retriable: the servers may mint again a moment later, and
    a refusal never means an ID was issued twice."""

    def __init__(self, message: str, last: grpc.RpcError | None = None) -> None:
        super().__init__(message)
        self.last = last
        """The last attempt's error, if any."""

    @property
    def code(self) -> grpc.StatusCode:
        """Always ``UNAVAILABLE``, whatever the last attempt said."""
        return grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(SnowmintError, grpc.RpcError):
    """The call's own ``timeout`` passed: during an attempt, a pause, or a wait on the buffer.
    Retriable. A ``grpc.RpcError`` with code ``DEADLINE_EXCEEDED``."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self) -> str:
        return str(self)


class ClientClosedError(SnowmintError):
    """A call on a closed client, or one that was waiting on it when it was closed."""


@dataclass(frozen=True)
class BufferConfig:
    """The local buffer of prefetched IDs. It refills at the rate IDs are used, within these
    bounds, by the rule of clients/README.md; the defaults are every client's."""

    batch: int = 4096
    """The most IDs one refill asks for (one BatchIds call)."""
    low_water: int = 8192
    """The most IDs the buffer keeps ahead of use: buffered, and asked for by refills under way."""
    max_refills: int = 3
    """Refills in flight at once, to keep up with heavy use."""
    max_age: float = 1.0
    """Seconds after which a buffered batch is dropped unused, counted from when its refill
    was sent, so the IDs handed out stay close to the time they are used."""

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
    """Each endpoint's target and credentials (``None`` for plain text): ``credentials`` for
    https:// endpoints, else the default roots."""
    if isinstance(endpoints, (str, bytes)):
        raise TypeError(f"endpoints must be a list of endpoints, not the string {endpoints!r}")
    targets = []
    for endpoint in endpoints:
        target, tls = parse_endpoint(endpoint)
        creds = (credentials or grpc.ssl_channel_credentials()) if tls else None
        targets.append((target, creds))
    if not targets:
        raise ValueError("no endpoints given")
    return targets


def channel_options(options: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """:data:`CHANNEL_OPTIONS`, then the caller's (which win)."""
    given = {name for name, _ in options}
    return [option for option in CHANNEL_OPTIONS if option[0] not in given] + list(options)


MAX_TOKEN_LENGTH = 4096
"""The most characters a bearer token may have."""


def token_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The gRPC metadata every attempt carries: ``authorization: Bearer <token>``, or none
    without a token. A token is 1 to 4,096 visible ASCII characters (``!`` to ``~``); any other
    raises ``ValueError``, whose message never holds the token."""
    if token is None:
        return ()
    if not isinstance(token, str):
        raise ValueError(f"the token must be a string, not {type(token).__name__}")
    if not 1 <= len(token) <= MAX_TOKEN_LENGTH:
        raise ValueError(f"the token must be 1 to {MAX_TOKEN_LENGTH} characters, got {len(token)}")
    bad = next((at for at, char in enumerate(token) if not "!" <= char <= "~"), None)
    if bad is not None:
        raise ValueError(f"the token's character at {bad} is not a visible ASCII character ('!' to '~')")
    return (("authorization", f"Bearer {token}"),)


def pause_before(attempt: int, endpoints: int) -> float:
    """Seconds to wait before ``attempt`` (from 0) of a call over ``endpoints``: none until
    every endpoint was tried in the call, then 10 ms doubling up to 320 ms."""
    if attempt < endpoints or attempt == 0:
        return 0.0
    return 0.010 * (1 << min(attempt - endpoints, 5))


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

    def start(self, timeout: float | None, now: float) -> Call:
        """A new call at monotonic time ``now``, bounded as a whole by ``timeout`` seconds
        when given."""
        return Call(self, None if timeout is None else now + timeout)

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
        self._cut = False
        self._again: int | None = None
        """The endpoint the next attempt goes to after a quota wait; None: the current one."""

    def next_attempt(self, now: float) -> tuple[int, float]:
        """The endpoint of the next attempt and its timeout in seconds: the client's timeout,
        or what is left of the call's own deadline when that is sooner."""
        timeout = self._rotation.timeout
        self._cut = False
        if self._deadline is not None:
            left = self._deadline - now
            if left <= 0:
                raise DeadlineExceededError("the call's timeout passed")
            self._cut = left < timeout
            timeout = min(timeout, left)
        index = self._rotation.current() if self._again is None else self._again
        self._again = None
        return index, timeout

    def failed(self, index: int, error: grpc.RpcError, now: float, quota_delay: float | None = None) -> float:
        """Handles a failed attempt at endpoint ``index``: the seconds to wait before the next
        attempt, or raises the error as it is (one that fails over nowhere),
        :class:`DeadlineExceededError` (the call's own deadline passed) or
        :class:`UnavailableError` (attempts used up). ``quota_delay`` is the wait a
        RESOURCE_EXHAUSTED refusal asks for (its RetryInfo), if it gives one."""
        code = cast(grpc.Call, error).code()
        deadline_passed = self._deadline is not None and now >= self._deadline
        if (deadline_passed or self._cut) and code == grpc.StatusCode.DEADLINE_EXCEEDED:
            # The call's deadline, which cut the attempt short, not the server: nothing moves.
            raise DeadlineExceededError("the call's timeout passed") from error
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and quota_delay is not None:
            return self._quota_wait(index, error, now, quota_delay)
        # With the call's own deadline still ahead, DEADLINE_EXCEEDED is the attempt's: the
        # server did not answer in time.
        if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            raise error
        rotation = self._rotation
        rotation.move_on(index)
        if deadline_passed:
            raise DeadlineExceededError("the call's timeout passed") from error
        self._attempt += 1
        if self._attempt >= rotation.attempts:
            details = cast(grpc.Call, error).details()
            why = f"every endpoint refused or failed after {rotation.attempts} attempts"
            raise UnavailableError(f"{why}; the last: {code.name}: {details}", error) from error
        pause = pause_before(self._attempt, rotation.endpoints)
        if self._deadline is not None:
            pause = min(pause, max(0.0, self._deadline - now))
        return pause

    def _quota_wait(self, index: int, error: grpc.RpcError, now: float, delay: float) -> float:
        """A refusal over the tenant's quota that says to wait ``delay`` seconds: the wait, in
        place of a pause, before the next attempt, which goes to the same endpoint (the quota
        is the tenant's at that server; nothing moves). Raises the refusal as it is when the
        call has no attempt left or its deadline is not more than ``delay`` away: a wait it
        could not use."""
        if self._attempt + 1 >= self._rotation.attempts:
            raise error
        if self._deadline is not None and self._deadline - now <= delay:
            raise error
        self._attempt += 1
        self._again = index
        return delay


REFILL_PAUSE = 0.1
"""Seconds after a refill that failed on every endpoint before another starts, so callers
looping on next_id() do not hammer servers that are all down."""


class _Fetched:
    __slots__ = ("ids", "sent")

    def __init__(self, ids: Sequence[int], sent: float) -> None:
        self.ids = deque(ids)
        self.sent = sent


class BufferState:
    """The buffer's bookkeeping, and its rule (clients/README.md, the same in every client),
    with ``lead = max_age / 4``:

    - rate: IDs handed out per second, in windows of at least ``lead``;
    - a refill is sent when, after dropping the stale batches, the IDs still fresh a lead from
      now plus those asked for by refills in flight are at most
      ``mark = min(low_water, rate * lead)`` (or fewer than the callers waiting), fewer than
      ``max_refills`` are in flight, none failed in the last 100 ms, and a caller waits or
      ``mark ≥ 1``; it asks for ``min(batch, max(rate * max_age, mark + 1, callers waiting))``;
    - the decision (:meth:`decide`) is made when a caller finds the buffer empty, when a pop
      leaves ``mark`` or fewer buffered and on their way (:attr:`countdown` reaches 0), when a
      refill ends, and a lead before the oldest batch goes stale.

    Callers pop from :attr:`front`, the oldest batch's IDs and the monotonic time it goes
    stale, with ``deque.popleft()``, which hands each ID out once even between threads, and
    keep it only if the clock is still before that time. Everything else runs under the
    blocking client's lock, or on the asyncio client's event loop. IDs handed out are counted
    from the batches themselves (received, less dropped, less left)."""

    def __init__(self, config: BufferConfig, now: float) -> None:
        self.config = config
        self.lead = config.max_age / 4
        self.front: tuple[deque[int], float] | None = None
        """The oldest batch's IDs and the time it goes stale; None when there is none."""
        self.countdown = 0
        """Pops left before a decision is due."""
        self.waiting = 0
        """Callers waiting on an empty buffer."""
        self.failures = 0
        """Refills that failed so far."""
        self.last_error: Exception | None = None
        self._batches: deque[_Fetched] = deque()
        self._refilling = 0
        self._asked = 0
        self._received = 0
        self._dropped = 0
        self._window_start = now
        self._window_taken = 0
        self._rate = 0.0
        self._mark = 0
        self._limit = config.batch
        self._retry_at = -math.inf

    def _set_front(self) -> None:
        self.front = (self._batches[0].ids, self._batches[0].sent + self.config.max_age) if self._batches else None

    def _buffered(self) -> int:
        return sum(len(b.ids) for b in self._batches)

    def pop(self, now: float) -> int | None:
        """The next ID, first dropping every batch ``max_age`` old; None when empty."""
        max_age = self.config.max_age
        while self._batches:
            front = self._batches[0]
            if front.ids and now - front.sent < max_age:
                self.countdown -= 1
                return front.ids.popleft()
            self._dropped += len(front.ids)
            self._batches.popleft()
            self._set_front()
        return None

    def _measure(self, now: float) -> None:
        """The rate rule: windows of at least a lead; a window still under way raises the rate
        once its own count says more."""
        taken_now = self._received - self._dropped - self._buffered()
        elapsed = now - self._window_start
        taken = taken_now - self._window_taken
        if elapsed >= self.lead:
            self._rate = taken / elapsed
            self._window_start, self._window_taken = now, taken_now
        else:
            self._rate = max(self._rate, taken / self.lead)

    def decide(self, now: float, closed: bool = False) -> tuple[list[int], float | None]:
        """The sizes of the refills to send at ``now`` (counted as under way), and when to
        decide again (None: not before something happens)."""
        max_age, lead = self.config.max_age, self.lead
        while self._batches and now - self._batches[0].sent >= max_age:
            self._dropped += len(self._batches[0].ids)
            self._batches.popleft()
            self._set_front()
        self._measure(now)
        self._mark = min(self.config.low_water, int(self._rate * lead))
        ahead = self._asked + sum(len(b.ids) for b in self._batches if b.sent + max_age > now + lead)
        # Fetch ahead only when an ID will be used within the lead; else a prefetched ID would
        # mostly go stale unused.
        wanted = (self.waiting > 0 or self._mark >= 1) and not closed and now >= self._retry_at
        refills = []
        while wanted and self._refilling < self.config.max_refills and (ahead <= self._mark or ahead < self.waiting):
            n = max(math.ceil(self._rate * max_age), self._mark + 1, self.waiting - ahead)
            n = max(1, min(n, self._limit))
            refills.append(n)
            self._refilling += 1
            self._asked += n
            ahead += n
        # Pops before the next decision: until the mark is reached; none while every refill is
        # in flight (the next to end decides).
        saturated = self._refilling >= self.config.max_refills
        self.countdown = 1 << 62 if saturated else max(1, self._buffered() + self._asked - self._mark)
        wake_at = next((b.sent + max_age - lead for b in self._batches if b.sent + max_age - lead > now), None)
        if self.waiting > 0 and self._retry_at > now and (wake_at is None or self._retry_at < wake_at):
            wake_at = self._retry_at
        return refills, wake_at

    def ended(self, asked: int, sent: float, ids: Sequence[int] | None, error: Exception | None, now: float) -> bool:
        """A refill of ``asked`` IDs, sent at ``sent``, brought ``ids`` or failed with
        ``error``. Whether the callers waiting may look again: IDs came, or the refill failed
        for good (one refused for its count is sent again for half as many)."""
        self._refilling -= 1
        self._asked -= asked
        if ids is not None:
            at = len(self._batches)
            while at > 0 and self._batches[at - 1].sent > sent:
                at -= 1
            self._batches.insert(at, _Fetched(ids, sent))
            self._received += len(ids)
            self._set_front()
            return True
        code = error.code() if isinstance(error, grpc.RpcError) else None
        if code == grpc.StatusCode.INVALID_ARGUMENT and asked > 1:
            # More than the server's --max-batch: ask for half as many from now on.
            self._limit = max(1, min(self._limit, asked // 2))
            return False
        self.failures += 1
        self.last_error = error
        self._retry_at = now + REFILL_PAUSE
        return True

    def close(self) -> None:
        """Drops every batch, emptied, so that a caller still holding the old front finds it
        empty: nothing more is handed out."""
        self.front = None
        for batch in self._batches:
            batch.ids.clear()
        self._batches.clear()
