"""The string form of opaque IDs, read and written with no key.

A server started with ``--opaque-key-file`` hands out opaque IDs: the ID put through a keyed
permutation (a value below 2**63) and the version of the key (0 to 31). Only the server's key
maps one back to its ID; the string form, 14 characters of Crockford base32 (the key version,
then the value in 13 characters, most significant first), needs none. Values are unique per
key version; strings carry the version, so they stay unique across key rotations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
"""Crockford's base32: digits and capitals without I, L, O and U."""

TEXT_LENGTH = 14
"""The length of the string form: a key version and 13 characters of value."""

_VALUE_LIMIT = 1 << 63

# The value of each character read, with its aliases: lower case, O for 0, I and L for 1.
_SYMBOLS: dict[str, int] = {c: i for i, c in enumerate(ALPHABET)}
_SYMBOLS.update({c.lower(): i for c, i in list(_SYMBOLS.items())})
_SYMBOLS.update({"O": 0, "o": 0, "I": 1, "i": 1, "L": 1, "l": 1})

OpaqueErrorKind = Literal["character", "length", "range", "version"]


class OpaqueIdError(ValueError):
    """Not an opaque ID: ``kind`` says why, as the shared test vectors name it
    (``character``, ``length`` or ``range`` for a string; ``version`` or ``range`` for
    :meth:`OpaqueId.of`)."""

    def __init__(self, kind: OpaqueErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: OpaqueErrorKind = kind


@dataclass(frozen=True)
class OpaqueId:
    """An opaque ID: its key version and its value. ``str()`` gives its string form."""

    key_version: int
    value: int

    @classmethod
    def of(cls, key_version: int, value: int) -> OpaqueId:
        """The opaque ID of ``value`` under ``key_version``, both checked."""
        if not 0 <= key_version <= 31:
            raise OpaqueIdError("version", f"key version {key_version} is not between 0 and 31")
        if not 0 <= value < _VALUE_LIMIT:
            raise OpaqueIdError("range", f"{value} is not a 63-bit value: opaque values are below 2**63")
        return cls(key_version, value)

    @classmethod
    def parse(cls, text: str) -> OpaqueId:
        """Reads a string form. Lower case reads as upper case, O as 0, I and L as 1, and
        hyphens anywhere are ignored; then, in this order, any other character, a length other
        than 14 without hyphens, and a value of 2**63 or more raise :class:`OpaqueIdError`."""
        symbols: list[int] = []
        for at, c in enumerate(text, start=1):
            if c == "-":
                continue
            symbol = _SYMBOLS.get(c)
            if symbol is None:
                raise OpaqueIdError("character", f"opaque ID {text!r}: {c!r} (character {at}) is not Crockford base32")
            symbols.append(symbol)
        if len(symbols) != TEXT_LENGTH:
            raise OpaqueIdError(
                "length", f"opaque ID {text!r} has {len(symbols)} characters without its hyphens, not 14"
            )
        if symbols[1] >= 8:
            raise OpaqueIdError("range", f"opaque ID {text!r} holds a value of 2**63 or more")
        value = 0
        for symbol in symbols[1:]:
            value = value << 5 | symbol
        return cls(symbols[0], value)

    def __str__(self) -> str:
        digits = [ALPHABET[(self.value >> (5 * shift)) & 31] for shift in range(12, -1, -1)]
        return ALPHABET[self.key_version & 31] + "".join(digits)
