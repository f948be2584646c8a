"""ID layouts and local decoding: an ID, or a UUID made from one, splits into time, worker
and sequence with nothing but its layout, so no server call is needed."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal

from ._uuid import DecodedUuid, UuidDecodeError

Order = Literal["worker_sequence", "sequence_worker"]
"""The order of the two fields below the time field: time | worker | sequence (snowmint,
Twitter, Discord, Instagram) or time | sequence | worker (Sonyflake)."""

DEFAULT_EPOCH_MS = 1_767_225_600_000
"""snowmint's default epoch, 2026-01-01T00:00:00Z, in Unix milliseconds."""

_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class NotThisLayoutError(ValueError):
    """The ID has bits set above the layout's fields (for snowmint's layouts, the sign bit),
    so it was not minted with that layout."""


@dataclass(frozen=True)
class Layout:
    """How an ID's 64 bits split into fields. It must match the layout the IDs were minted
    with: for snowmint, the server's ``--epoch``, ``--worker-bits`` and ``--sequence-bits``."""

    name: str
    epoch_ms: int
    """Unix time in milliseconds at which tick 0 starts."""
    tick_ms: int
    """Length of one tick in milliseconds."""
    time_bits: int
    worker_bits: int
    sequence_bits: int
    order: Order = "worker_sequence"

    @classmethod
    def snowmint(cls, epoch_ms: int = DEFAULT_EPOCH_MS, worker_bits: int = 10, sequence_bits: int = 12) -> Layout:
        """snowmint's layout: 1 ms ticks, time | worker | sequence, the time field taking the
        rest of the 63 bits below the sign bit. The defaults are the server's."""
        return cls("snowmint", epoch_ms, 1, 63 - worker_bits - sequence_bits, worker_bits, sequence_bits)

    @classmethod
    def named(cls, name: str) -> Layout:
        """A preset by name, as the server's Decode call knows them: snowmint (the default
        layout), twitter, discord, instagram, sonyflake."""
        if name == "snowmint":
            return cls.snowmint()
        try:
            return _PRESETS[name]
        except KeyError:
            known = ", ".join(["snowmint", *_PRESETS])
            raise ValueError(f"unknown layout {name!r}; known layouts: {known}") from None

    def _check(self) -> None:
        if self.time_bits + self.worker_bits + self.sequence_bits > 64 or self.time_bits < 1 or self.tick_ms < 1:
            raise ValueError(f"invalid layout {self}")

    def decode_uuid(self, u: uuid.UUID) -> DecodedUuid:
        """What the snowmint UUIDv7 ``u`` carries, when it could have been minted with this
        layout: the ID it was made from, its time, slot, sequence and random bits. Checks, in
        this order, and raises :class:`UuidDecodeError` with the ``kind`` named: version 7
        (``version``), the variant 0b10 (``variant``), a slot and a sequence that fit the
        layout's fields (``fields``), a time that is the start of one of the layout's ticks,
        within its range (``tick``)."""
        self._check()
        value = u.int
        version = value >> 76 & 0xF
        if version != 7:
            raise UuidDecodeError("version", f"{u} is not a UUIDv7: its version is {version}")
        variant = value >> 62 & 0b11
        if variant != 0b10:
            raise UuidDecodeError("variant", f"{u} is not an RFC 9562 UUID: its variant bits are {variant:#04b}")
        unix_ms = value >> 80
        minted = (value >> 64 & 0xFFF) << 30 | (value >> 32 & _mask(30))
        slot, sequence = minted >> 22, minted & _mask(22)
        if slot > _mask(self.worker_bits) or sequence > _mask(self.sequence_bits):
            raise UuidDecodeError(
                "fields",
                f"{u} was not minted with layout {self.name!r}: its slot {slot} or sequence {sequence} "
                "does not fit the layout's fields",
            )
        since, off_tick = divmod(unix_ms - self.epoch_ms, self.tick_ms)
        if unix_ms < self.epoch_ms or off_tick or since > _mask(self.time_bits):
            raise UuidDecodeError(
                "tick",
                f"{u} was not minted with layout {self.name!r}: its time {unix_ms} is not the start "
                "of one of the layout's ticks",
            )
        low = self.worker_bits + self.sequence_bits
        if self.order == "worker_sequence":
            id = since << low | slot << self.sequence_bits | sequence
        else:
            id = since << low | sequence << self.worker_bits | slot
        return DecodedUuid(id=id, unix_ms=unix_ms, slot=slot, sequence=sequence, random=value & _mask(32))


_PRESETS = {
    "twitter": Layout("twitter", 1_288_834_974_657, 1, 41, 10, 12),
    # A 5-bit worker and a 5-bit process, read together as one 10-bit worker.
    "discord": Layout("discord", 1_420_070_400_000, 1, 42, 10, 12),
    # The 13-bit logical shard is the worker.
    "instagram": Layout("instagram", 1_314_220_021_721, 1, 41, 13, 10),
    # 10 ms ticks from 2014-09-01, an 8-bit sequence above a 16-bit machine ID.
    "sonyflake": Layout("sonyflake", 1_409_529_600_000, 10, 39, 16, 8, "sequence_worker"),
}

DEFAULT_LAYOUT = Layout.snowmint()
"""The layout a snowmint server mints with unless configured otherwise."""


@dataclass(frozen=True)
class Decoded:
    """An ID split into its fields."""

    id: int
    tick: int
    """The raw time field: ticks since the layout's epoch."""
    unix_ms: int
    """The start of the ID's tick, in Unix milliseconds."""
    worker_id: int
    sequence: int

    @property
    def time(self) -> datetime:
        """The start of the ID's tick, in UTC."""
        return _UNIX_EPOCH + timedelta(milliseconds=self.unix_ms)

    @property
    def rfc3339(self) -> str:
        """The start of the ID's tick in RFC 3339, UTC, with milliseconds, as the server writes
        it: ``2026-01-01T00:00:00.123Z``."""
        return self.time.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.unix_ms % 1000:03d}Z"


def _mask(bits: int) -> int:
    return (1 << bits) - 1


def decode(id: int, layout: Layout = DEFAULT_LAYOUT) -> Decoded:
    """Splits ``id`` into its fields with ``layout``, the same way the server's Decode call
    does. Raises :class:`NotThisLayoutError` for an ID with bits above the layout's fields."""
    layout._check()
    total = layout.time_bits + layout.worker_bits + layout.sequence_bits
    if not 0 <= id < 1 << 64:
        raise ValueError(f"{id} is not an unsigned 64-bit ID")
    if id >> total:
        raise NotThisLayoutError(f"{id} has bits above the {total} bits of layout {layout.name!r}")
    low = layout.worker_bits + layout.sequence_bits
    if layout.order == "worker_sequence":
        worker_shift, sequence_shift = layout.sequence_bits, 0
    else:
        worker_shift, sequence_shift = 0, layout.worker_bits
    tick = id >> low & _mask(layout.time_bits)
    return Decoded(
        id=id,
        tick=tick,
        unix_ms=layout.epoch_ms + tick * layout.tick_ms,
        worker_id=id >> worker_shift & _mask(layout.worker_bits),
        sequence=id >> sequence_shift & _mask(layout.sequence_bits),
    )


def decode_uuid(u: uuid.UUID, layout: Layout = DEFAULT_LAYOUT) -> DecodedUuid:
    """:meth:`Layout.decode_uuid` with ``layout``, snowmint's default layout unless given."""
    return layout.decode_uuid(u)
