"""The prefetch buffer of named sequences (``sequence_prefetch``), the contract of
clients/README.md, shared by :class:`Client` and :class:`AsyncClient`: per sequence, values
fetched ahead by one BatchValues and handed out one by one by ``next_value``.

Each sequence has one lock over its buffered values (a ``threading.Lock`` or an
``asyncio.Lock``, as the client makes it), held across a refill: a caller that finds the buffer
empty refills it while the others wait on the lock (each within its own timeout), then take
what it left, so no two callers refill one sequence at once and no value goes to two callers.
Until an answer has said whether the sequence is ordered, a refill is one NextValue; an
unordered sequence is refilled by BatchValues(n); an ordered one is never buffered (its values
increase fleet-wide in the order calls are answered, which buffering would break), so its
callers skip the lock and make one NextValue each. A refill that fails raises what the direct
call would; the next caller tries again. A batch answered OUT_OF_RANGE (fewer values left than
asked for) is followed by one NextValue, so the last values of a sequence are still handed
out. NOT_FOUND forgets whether the sequence is ordered: it may be created again otherwise.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import grpc

MAX_SEQUENCE_PREFETCH = 65536
"""The most values one refill asks for: the server's default ``--max-batch``."""


def check_sequence_prefetch(n: int) -> int:
    """``n`` when it is 0 (off) to :data:`MAX_SEQUENCE_PREFETCH`; raises ``ValueError``
    otherwise."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_SEQUENCE_PREFETCH:
        raise ValueError(
            f"sequence_prefetch {n!r} is out of range: 0 (off) to {MAX_SEQUENCE_PREFETCH},"
            " the server's default --max-batch"
        )
    return n


class SequenceBuffer:
    """One sequence's buffered values and what the answers said of it."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock
        """Held while a caller takes from the buffer or refills it."""
        self.ordered: bool | None = None
        """None until an answer said; read without the lock."""
        self.values: deque[int] = deque()
        """Fetched, not yet handed out, in the order they came (increasing within a refill)."""

    def learn(self, ordered: bool) -> None:
        self.ordered = ordered

    def failed(self, error: BaseException) -> None:
        """A call for this sequence raised ``error``: NOT_FOUND forgets the kind."""
        if isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.NOT_FOUND:
            self.ordered = None

    def kept(self, values: list[int], ordered: bool) -> int:
        """A BatchValues answer: the first value is the caller's, the rest are buffered (values
        of a batch answered ordered, the sequence made ordered since, are still this client's
        alone: handed out from here, never twice)."""
        self.learn(ordered)
        self.values.extend(values[1:])
        return values[0]


def out_of_range(error: BaseException) -> bool:
    return isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.OUT_OF_RANGE


class SequencePrefetch:
    """The buffers of one client, one per sequence used."""

    def __init__(self, per_refill: int, make_lock: Callable[[], Any]) -> None:
        self.per_refill = per_refill
        self._make_lock = make_lock
        self._sequences: dict[str, SequenceBuffer] = {}

    def sequence(self, name: str) -> SequenceBuffer:
        # dict.setdefault is atomic under the GIL: two threads get the same buffer.
        found = self._sequences.get(name)
        if found is None:
            found = self._sequences.setdefault(name, SequenceBuffer(self._make_lock()))
        return found
