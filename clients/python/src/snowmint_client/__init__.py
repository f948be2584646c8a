"""Python client of snowmint, a service that mints unique, roughly time-sorted 64-bit IDs.

:class:`Client` (blocking, thread-safe) and :class:`AsyncClient` (asyncio) follow the
contract in clients/README.md: failover to the next endpoint when a server refuses
(UNAVAILABLE) or cannot be reached, every other gRPC error raised as it is, per-call
deadlines, an optional buffer of prefetched IDs, and a bearer ``token`` for a server with a
policy, whose quota refusals are waited out. IDs are plain ``int`` values from 0 to
2**64 - 1; snowmint's are below 2**63. :func:`decode` splits an ID locally, and
:class:`OpaqueId` reads and writes the string form of opaque IDs, with no key.

``next_uuid()`` and ``batch_uuids(n)`` mint UUIDv7s (the standard library's
:class:`uuid.UUID`), each made from one minted ID; :func:`parse_uuid` reads their text form
strictly, :func:`format_uuid` writes it, and :meth:`Layout.decode_uuid` (or
:func:`decode_uuid`) reads a UUID back into the ID it was made from.
"""

from ._aio import AsyncClient
from ._client import Client
from ._core import (
    DEFAULT_TIMEOUT,
    BufferConfig,
    ClientClosedError,
    DeadlineExceededError,
    SnowmintError,
    UnavailableError,
)
from ._layout import (
    DEFAULT_EPOCH_MS,
    DEFAULT_LAYOUT,
    Decoded,
    Layout,
    NotThisLayoutError,
    Order,
    decode,
    decode_uuid,
)
from ._opaque import OpaqueId, OpaqueIdError
from ._prefetch import MAX_SEQUENCE_PREFETCH
from ._uuid import DecodedUuid, UuidDecodeError, format_uuid, parse_uuid
from ._wire import WireError, quota_delay

__all__ = [
    "DEFAULT_EPOCH_MS",
    "DEFAULT_LAYOUT",
    "DEFAULT_TIMEOUT",
    "MAX_SEQUENCE_PREFETCH",
    "AsyncClient",
    "BufferConfig",
    "Client",
    "ClientClosedError",
    "DeadlineExceededError",
    "Decoded",
    "DecodedUuid",
    "Layout",
    "NotThisLayoutError",
    "OpaqueId",
    "OpaqueIdError",
    "Order",
    "SnowmintError",
    "UnavailableError",
    "UuidDecodeError",
    "WireError",
    "decode",
    "decode_uuid",
    "format_uuid",
    "parse_uuid",
    "quota_delay",
]
