from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class NextIdRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NextIdResponse(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class BatchIdsRequest(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class BatchIdsResponse(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class DecodeRequest(_message.Message):
    __slots__ = ("id", "layout")
    ID_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    id: int
    layout: str
    def __init__(self, id: _Optional[int] = ..., layout: _Optional[str] = ...) -> None: ...

class DecodeResponse(_message.Message):
    __slots__ = ("id", "unix_ms", "worker_id", "sequence", "time", "layout")
    ID_FIELD_NUMBER: _ClassVar[int]
    UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    id: int
    unix_ms: int
    worker_id: int
    sequence: int
    time: str
    layout: str
    def __init__(self, id: _Optional[int] = ..., unix_ms: _Optional[int] = ..., worker_id: _Optional[int] = ..., sequence: _Optional[int] = ..., time: _Optional[str] = ..., layout: _Optional[str] = ...) -> None: ...
