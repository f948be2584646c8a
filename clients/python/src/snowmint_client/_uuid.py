"""snowmint's UUIDv7s (RFC 9562): their text form, read strictly, and what decoding one gives.

A snowmint UUID is made from one minted ID, so it is unique as the ID is. Its 128 bits, most
significant first: 48 bits of Unix milliseconds (the start of the ID's tick), the version 7 in
4 bits, the top 12 bits of the 42-bit *minted field* (the slot in 20 bits, then the sequence in
22), the variant 0b10 in 2 bits, the minted field's low 30 bits, and 32 random bits. UUIDs are
the standard library's :class:`uuid.UUID`; :meth:`snowmint_client.Layout.decode_uuid` reads
one back into the ID it was made from.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal

UuidErrorKind = Literal["version", "variant", "fields", "tick", "text"]

TEXT_LENGTH = 36
"""The length of the text form: 32 hex digits and 4 hyphens."""

_HYPHENS = (8, 13, 18, 23)
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class UuidDecodeError(ValueError):
    """A UUID snowmint could not have minted, or a string that is not a UUID's text form.
    ``kind`` says why, as the shared test vectors name it: ``version`` (not version 7),
    ``variant`` (not RFC 9562's 0b10), ``fields`` (a slot or sequence above the layout's
    fields), ``tick`` (a time that is not the start of one of the layout's ticks, or outside
    its range), or ``text`` (from :func:`parse_uuid`)."""

    def __init__(self, kind: UuidErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: UuidErrorKind = kind


@dataclass(frozen=True)
class DecodedUuid:
    """What a snowmint UUID carries."""

    id: int
    """The 64-bit ID the UUID was made from."""
    unix_ms: int
    """The Unix millisecond at which the ID's tick starts: the UUID's 48-bit time field."""
    slot: int
    """The worker slot (the ID's worker field)."""
    sequence: int
    random: int
    """The 32 random bits at the end."""

    @property
    def time(self) -> datetime:
        """The start of the ID's tick, in UTC."""
        return _UNIX_EPOCH + timedelta(milliseconds=self.unix_ms)


def parse_uuid(text: str) -> uuid.UUID:
    """Reads a UUID's text form strictly, as the server does: exactly 36 ASCII characters, hex
    digits of either case in groups of 8-4-4-4-12, a ``-`` between the groups and nothing else
    (no braces, no ``urn:uuid:``, no spaces, no missing hyphens, which ``uuid.UUID(text)``
    would take). Anything else raises :class:`UuidDecodeError` of kind ``text`` (a
    ``ValueError``)."""
    if not isinstance(text, str):
        raise TypeError(f"a UUID's text form is a str, not {type(text).__name__}")
    if len(text) != TEXT_LENGTH:
        raise UuidDecodeError("text", f"{text[:64]!r} is not a UUID: {len(text)} characters, not 36")
    for at, c in enumerate(text):
        if at in _HYPHENS:
            if c != "-":
                raise UuidDecodeError("text", f"{text!r} is not a UUID: no hyphen at index {at}")
        elif c not in _HEX_DIGITS:
            raise UuidDecodeError("text", f"{text!r} is not a UUID: {c!r} (index {at}) is not a hex digit")
    return uuid.UUID(hex=text.replace("-", ""))


def format_uuid(u: uuid.UUID) -> str:
    """The canonical text form: lower-case hex digits in groups of 8-4-4-4-12 (``str(u)``)."""
    return str(u)
