"""The calls the clients make, on the wire: the method paths of proto/snowmint/v1/
snowmint.proto and their messages in the protobuf encoding, written and read here directly.
No protobuf runtime is needed, so the package pins no protobuf version against the
application's own: only the fields below are used, and tests/test_wire.py checks their numbers
and types against the proto file.

    NextIdRequest {}                      NextIdResponse { fixed64 id = 1; }
    BatchIdsRequest { uint32 count = 1; } BatchIdsResponse { repeated fixed64 ids = 1; }
    NextUuidRequest {}                    NextUuidResponse { bytes uuid = 1; string text = 2; }
    BatchUuidsRequest { uint32 count = 1; }
                                          BatchUuidsResponse { repeated bytes uuids = 1;
                                                               repeated string texts = 2; }
    NextValueRequest { string sequence = 1; }
                                          NextValueResponse { int64 value = 1; bool ordered = 2; }
    BatchValuesRequest { string sequence = 1; uint32 count = 2; }
                                          BatchValuesResponse { repeated int64 values = 1;
                                                                bool ordered = 2; }

The UUIDs are read from their bytes alone (each must be 16); the texts are skipped. Any other
field of an answer (a newer server's) is skipped, as protobuf readers do.

A refusal's status details (the ``grpc-status-details-bin`` trailer) are read as far as a quota
wait needs, by :func:`retry_delay`:

    google.rpc.Status { int32 code = 1; string message = 2; repeated google.protobuf.Any details = 3; }
    google.protobuf.Any { string type_url = 1; bytes value = 2; }
    google.rpc.RetryInfo { google.protobuf.Duration retry_delay = 1; }
    google.protobuf.Duration { int64 seconds = 1; int32 nanos = 2; }
"""

from __future__ import annotations

import itertools
import struct
import uuid
from collections.abc import Iterator
from typing import cast

import grpc

from ._core import SnowmintError

NEXT_ID = "/snowmint.v1.IdService/NextId"
BATCH_IDS = "/snowmint.v1.IdService/BatchIds"
NEXT_UUID = "/snowmint.v1.IdService/NextUuid"
BATCH_UUIDS = "/snowmint.v1.IdService/BatchUuids"
NEXT_VALUE = "/snowmint.v1.IdService/NextValue"
BATCH_VALUES = "/snowmint.v1.IdService/BatchValues"

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


class WireError(SnowmintError, ValueError):
    """A server's answer that is not the message it should be: protobuf that does not parse,
    or a UUID that is not 16 bytes. Raised as it is, not failed over."""


def next_id_request() -> bytes:
    """NextIdRequest {}: every field at its default, so no bytes."""
    return b""


def batch_ids_request(count: int) -> bytes:
    """BatchIdsRequest { count }: field 1 as a varint (omitted at 0, its default)."""
    if not 0 <= count < 1 << 32:
        raise ValueError(f"count {count} does not fit a uint32")
    out = bytearray()
    if count:
        out.append(0x08)
        while count >= 0x80:
            out.append(count & 0x7F | 0x80)
            count >>= 7
        out.append(count)
    return bytes(out)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise WireError("a varint runs past the message")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int, int, int]]:
    """Each field of a message: its number, wire type, and where its value's bytes start and
    end (a length-delimited field's contents; a varint's own bytes)."""
    at, end = 0, len(data)
    while at < end:
        key, at = _varint(data, at)
        field, kind = key >> 3, key & 7
        start = at
        if kind == _VARINT:
            _, at = _varint(data, at)
        elif kind == _FIXED64:
            at += 8
        elif kind == _LENGTH:
            length, start = _varint(data, at)
            at = start + length
        elif kind == _FIXED32:
            at += 4
        else:
            raise WireError(f"wire type {kind} of field {field}")
        if at > end:
            raise WireError(f"field {field} runs past the message")
        yield field, kind, start, at


def _fixed64s(data: bytes) -> list[int]:
    """Every value of field 1 (fixed64), packed or not; other fields skipped."""
    ids: list[int] = []
    for field, kind, start, end in _fields(data):
        if field != 1:
            continue
        if kind == _FIXED64:
            ids.append(int.from_bytes(data[start:end], "little"))
        elif kind == _LENGTH:
            if (end - start) % 8:
                raise WireError(f"packed fixed64s of {end - start} bytes")
            ids.extend(struct.unpack_from(f"<{(end - start) // 8}Q", data, start))
    return ids


def next_id_response(data: bytes) -> int:
    """NextIdResponse's id (0 when absent, as protobuf reads a missing field; a repeated one's
    last value wins)."""
    ids = _fixed64s(data)
    return ids[-1] if ids else 0


def batch_ids_response(data: bytes) -> list[int]:
    """BatchIdsResponse's ids."""
    return _fixed64s(data)


def next_uuid_request() -> bytes:
    """NextUuidRequest {}: no fields, so no bytes."""
    return b""


def batch_uuids_request(count: int) -> bytes:
    """BatchUuidsRequest { count }: encoded as BatchIdsRequest is (field 1, a uint32)."""
    return batch_ids_request(count)


def _length_delimited(data: bytes) -> list[bytes]:
    """Every value of field 1 (length-delimited: bytes) in order; other fields skipped."""
    return [data[start:end] for field, kind, start, end in _fields(data) if field == 1 and kind == _LENGTH]


def _uuid(data: bytes) -> uuid.UUID:
    if len(data) != 16:
        raise WireError(f"a UUID of {len(data)} bytes, not 16")
    return uuid.UUID(bytes=data)


def next_uuid_response(data: bytes) -> uuid.UUID:
    """NextUuidResponse's uuid (a repeated one's last value wins, as protobuf reads it). Raises
    :class:`WireError` unless it is 16 bytes: absent, it is empty."""
    values = _length_delimited(data)
    return _uuid(values[-1] if values else b"")


def batch_uuids_response(data: bytes) -> list[uuid.UUID]:
    """BatchUuidsResponse's uuids. Raises :class:`WireError` unless each is 16 bytes."""
    return [_uuid(value) for value in _length_delimited(data)]


def identity(data: bytes) -> bytes:
    """The serializer of requests already encoded."""
    return data


def _put_varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def _sequence_field(name: str) -> bytearray:
    """Field 1, the sequence's name, as a string (omitted when empty, its default)."""
    out = bytearray()
    data = name.encode()
    if data:
        out.append(0x0A)
        _put_varint(out, len(data))
        out += data
    return out


def next_value_request(name: str) -> bytes:
    """NextValueRequest { sequence }."""
    return bytes(_sequence_field(name))


def batch_values_request(name: str, count: int) -> bytes:
    """BatchValuesRequest { sequence, count }: count as field 2, a varint (omitted at 0)."""
    if not 0 <= count < 1 << 32:
        raise ValueError(f"count {count} does not fit a uint32")
    out = _sequence_field(name)
    if count:
        out.append(0x10)
        _put_varint(out, count)
    return bytes(out)


def _signed(value: int, bits: int) -> int:
    """A varint read as a two's complement integer of ``bits`` bits (int64, or int32 written
    sign-extended to 64 bits as protobuf does)."""
    value &= (1 << 64) - 1
    value -= (1 << 64) if value >= 1 << 63 else 0
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise WireError(f"a varint beyond int{bits}")
    return value


def _int64s(data: bytes) -> list[int]:
    """Every value of field 1 (int64, a varint read as two's complement), packed or not; other
    fields skipped."""
    values: list[int] = []
    for field, kind, start, end in _fields(data):
        if field != 1 or kind not in (_VARINT, _LENGTH):
            continue
        at = start
        while at < end:
            value, at = _varint(data, at)
            values.append(_signed(value, 64))
        if at != end:
            raise WireError("packed int64s run past their field")
    return values


def _positive_increasing(values: list[int]) -> list[int]:
    if any(v < 1 for v in values) or any(a >= b for a, b in itertools.pairwise(values)):
        raise WireError("sequence values that are not positive and increasing")
    return values


def next_value_response(data: bytes) -> int:
    """NextValueResponse's value (a repeated one's last value wins). Raises :class:`WireError`
    unless it is positive."""
    values = _int64s(data)
    return _positive_increasing(values[-1:] if values else [0])[0]


def batch_values_response(data: bytes) -> list[int]:
    """BatchValuesResponse's values. Raises :class:`WireError` unless they are positive and
    increasing."""
    return _positive_increasing(_int64s(data))


def ordered(data: bytes) -> bool:
    """NextValueResponse's or BatchValuesResponse's ``ordered`` (field 2, a varint; false when
    absent, the last one wins)."""
    found = False
    for field, kind, start, _ in _fields(data):
        if field == 2 and kind == _VARINT:
            found = _varint(data, start)[0] != 0
    return found


STATUS_DETAILS = "grpc-status-details-bin"
"""The trailer that holds a refusal's google.rpc.Status, details included."""

_RETRY_INFO = "google.rpc.RetryInfo"


def _duration(data: bytes) -> float:
    """google.protobuf.Duration in seconds (the last value of each field wins). Raises
    :class:`WireError` unless it is a valid Duration that is not negative."""
    seconds = nanos = 0
    for field, kind, start, _ in _fields(data):
        if field == 1 and kind == _VARINT:
            seconds = _signed(_varint(data, start)[0], 64)
        elif field == 2 and kind == _VARINT:
            nanos = _signed(_varint(data, start)[0], 32)
    if seconds < 0 or not 0 <= nanos < 1_000_000_000:
        raise WireError("a negative or malformed Duration")
    return seconds + nanos / 1e9


def _retry_info(data: bytes) -> float | None:
    """google.rpc.RetryInfo's retry_delay in seconds; None when it has none."""
    delay = None
    for field, kind, start, end in _fields(data):
        if field == 1 and kind == _LENGTH:
            delay = _duration(data[start:end])
    return delay


def retry_delay(details: bytes) -> float | None:
    """The retry delay, in seconds, of a google.rpc.Status (a ``grpc-status-details-bin``
    trailer): that of its first detail whose type URL ends in ``google.rpc.RetryInfo`` and
    that gives one. None when there is none, or when the blob does not parse: a malformed
    blob is read as one without a RetryInfo, never raised."""
    try:
        for field, kind, start, end in _fields(details):
            if field != 3 or kind != _LENGTH:
                continue
            detail = details[start:end]  # a google.protobuf.Any
            type_url, value = "", b""
            for any_field, any_kind, any_start, any_end in _fields(detail):
                if any_field == 1 and any_kind == _LENGTH:
                    type_url = detail[any_start:any_end].decode()
                elif any_field == 2 and any_kind == _LENGTH:
                    value = detail[any_start:any_end]
            if type_url.endswith(_RETRY_INFO):
                delay = _retry_info(value)
                if delay is not None:
                    return delay
    except (WireError, UnicodeDecodeError):
        return None
    return None


def quota_delay(error: grpc.RpcError) -> float | None:
    """The seconds a RESOURCE_EXHAUSTED refusal says to wait: the RetryInfo in its status
    details. None for any other error, and for one without a RetryInfo."""
    call = cast(grpc.Call, error)
    if call.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    for key, value in call.trailing_metadata() or ():
        if key == STATUS_DETAILS and isinstance(value, bytes):
            return retry_delay(value)
    return None
