"""Python client of snowmint, a service that mints unique, roughly time-sorted 64-bit IDs.

:class:`Client` (blocking, thread-safe) and :class:`AsyncClient` (asyncio) follow the
contract in clients/README.md: failover to the next endpoint when a server refuses
(UNAVAILABLE) or cannot be reached, every other gRPC error raised as it is, per-call
deadlines, and an optional buffer of prefetched IDs. IDs are plain ``int`` values from 0 to
2**64 - 1; snowmint's are below 2**63. :func:`decode` splits an ID locally, and
:class:`OpaqueId` reads and writes the string form of opaque IDs, with no key.
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
from ._layout import DEFAULT_EPOCH_MS, DEFAULT_LAYOUT, Decoded, Layout, NotThisLayoutError, Order, decode
from ._opaque import OpaqueId, OpaqueIdError

__all__ = [
    "DEFAULT_EPOCH_MS",
    "DEFAULT_LAYOUT",
    "DEFAULT_TIMEOUT",
    "AsyncClient",
    "BufferConfig",
    "Client",
    "ClientClosedError",
    "DeadlineExceededError",
    "Decoded",
    "Layout",
    "NotThisLayoutError",
    "OpaqueId",
    "OpaqueIdError",
    "Order",
    "SnowmintError",
    "UnavailableError",
    "decode",
]
