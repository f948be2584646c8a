from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NextIdRequest(_message.Message):
    __slots__ = ("opaque",)
    OPAQUE_FIELD_NUMBER: _ClassVar[int]
    opaque: bool
    def __init__(self, opaque: _Optional[bool] = ...) -> None: ...

class NextIdResponse(_message.Message):
    __slots__ = ("id", "text", "key_version")
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    KEY_VERSION_FIELD_NUMBER: _ClassVar[int]
    id: int
    text: str
    key_version: int
    def __init__(self, id: _Optional[int] = ..., text: _Optional[str] = ..., key_version: _Optional[int] = ...) -> None: ...

class BatchIdsRequest(_message.Message):
    __slots__ = ("count", "opaque")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    OPAQUE_FIELD_NUMBER: _ClassVar[int]
    count: int
    opaque: bool
    def __init__(self, count: _Optional[int] = ..., opaque: _Optional[bool] = ...) -> None: ...

class BatchIdsResponse(_message.Message):
    __slots__ = ("ids", "texts", "key_version")
    IDS_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    KEY_VERSION_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    key_version: int
    def __init__(self, ids: _Optional[_Iterable[int]] = ..., texts: _Optional[_Iterable[str]] = ..., key_version: _Optional[int] = ...) -> None: ...

class DecodeRequest(_message.Message):
    __slots__ = ("id", "layout", "provenance", "text", "opaque", "key_version")
    ID_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    OPAQUE_FIELD_NUMBER: _ClassVar[int]
    KEY_VERSION_FIELD_NUMBER: _ClassVar[int]
    id: int
    layout: str
    provenance: bool
    text: str
    opaque: bool
    key_version: int
    def __init__(self, id: _Optional[int] = ..., layout: _Optional[str] = ..., provenance: _Optional[bool] = ..., text: _Optional[str] = ..., opaque: _Optional[bool] = ..., key_version: _Optional[int] = ...) -> None: ...

class DecodeResponse(_message.Message):
    __slots__ = ("id", "unix_ms", "worker_id", "sequence", "time", "layout", "provenance")
    ID_FIELD_NUMBER: _ClassVar[int]
    UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    id: int
    unix_ms: int
    worker_id: int
    sequence: int
    time: str
    layout: str
    provenance: Provenance
    def __init__(self, id: _Optional[int] = ..., unix_ms: _Optional[int] = ..., worker_id: _Optional[int] = ..., sequence: _Optional[int] = ..., time: _Optional[str] = ..., layout: _Optional[str] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ...) -> None: ...

class Provenance(_message.Message):
    __slots__ = ("found", "reason", "record", "worker_id", "hostname", "pod", "pid", "version", "started_at_ms", "lease", "claimed_at_ms", "floor_ms", "last_reservation_ms", "closed_at_ms")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    FLOOR_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_RESERVATION_MS_FIELD_NUMBER: _ClassVar[int]
    CLOSED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    found: bool
    reason: str
    record: str
    worker_id: int
    hostname: str
    pod: str
    pid: int
    version: str
    started_at_ms: int
    lease: int
    claimed_at_ms: int
    floor_ms: int
    last_reservation_ms: int
    closed_at_ms: int
    def __init__(self, found: _Optional[bool] = ..., reason: _Optional[str] = ..., record: _Optional[str] = ..., worker_id: _Optional[int] = ..., hostname: _Optional[str] = ..., pod: _Optional[str] = ..., pid: _Optional[int] = ..., version: _Optional[str] = ..., started_at_ms: _Optional[int] = ..., lease: _Optional[int] = ..., claimed_at_ms: _Optional[int] = ..., floor_ms: _Optional[int] = ..., last_reservation_ms: _Optional[int] = ..., closed_at_ms: _Optional[int] = ...) -> None: ...

class RevealRequest(_message.Message):
    __slots__ = ("id", "key_version", "text")
    ID_FIELD_NUMBER: _ClassVar[int]
    KEY_VERSION_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    id: int
    key_version: int
    text: str
    def __init__(self, id: _Optional[int] = ..., key_version: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class RevealResponse(_message.Message):
    __slots__ = ("id", "key_version")
    ID_FIELD_NUMBER: _ClassVar[int]
    KEY_VERSION_FIELD_NUMBER: _ClassVar[int]
    id: int
    key_version: int
    def __init__(self, id: _Optional[int] = ..., key_version: _Optional[int] = ...) -> None: ...
