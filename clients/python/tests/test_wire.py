"""The client's own encoding of its calls (_wire.py): the fields it reads and writes are
those of proto/snowmint/v1/snowmint.proto, and it reads what any protobuf writer may send; and
its reading of a quota refusal's RetryInfo from the status details."""

from __future__ import annotations

import random
import re
import struct
import uuid
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from snowmint_client import _wire

PROTO = (Path(__file__).resolve().parents[3] / "proto" / "snowmint" / "v1" / "snowmint.proto").read_text()


def fields(message: str) -> dict[str, tuple[str, int]]:
    body = re.search(rf"^message {message} {{(.*?)^}}", PROTO, re.M | re.S)
    assert body, f"no message {message} in the proto"
    found = re.findall(r"^\s+(repeated \w+|\w+) (\w+) = (\d+);", body.group(1), re.M)
    return {name: (kind, int(number)) for kind, name, number in found}


def test_the_fields_are_the_protos() -> None:
    assert fields("NextIdResponse")["id"] == ("fixed64", 1)
    assert fields("BatchIdsRequest")["count"] == ("uint32", 1)
    assert fields("BatchIdsResponse")["ids"] == ("repeated fixed64", 1)
    assert "package snowmint.v1;" in PROTO
    assert re.search(r"rpc NextId\(NextIdRequest\) returns \(NextIdResponse\);", PROTO)
    assert re.search(r"rpc BatchIds\(BatchIdsRequest\) returns \(BatchIdsResponse\);", PROTO)
    assert (_wire.NEXT_ID, _wire.BATCH_IDS) == ("/snowmint.v1.IdService/NextId", "/snowmint.v1.IdService/BatchIds")


def test_requests() -> None:
    assert _wire.next_id_request() == b""
    assert _wire.batch_ids_request(0) == b""
    assert _wire.batch_ids_request(1) == b"\x08\x01"
    assert _wire.batch_ids_request(300) == b"\x08\xac\x02"
    assert _wire.batch_ids_request(2**32 - 1) == b"\x08\xff\xff\xff\xff\x0f"
    with pytest.raises(ValueError):
        _wire.batch_ids_request(2**32)


def test_answers_packed_unpacked_and_with_fields_unknown_here() -> None:
    ids = [0, 1, 2**63 - 1, 2**64 - 1, 175928847299117063]
    packed = b"\x0a" + bytes([8 * len(ids)]) + struct.pack(f"<{len(ids)}Q", *ids)
    assert _wire.batch_ids_response(packed) == ids
    unpacked = b"".join(b"\x09" + struct.pack("<Q", i) for i in ids)
    assert _wire.batch_ids_response(unpacked) == ids
    # texts (2, strings), key_version (3, varint), a fixed32 field 9 and a fixed64 field 10.
    extra = b"\x12\x02ab\x18\x96\x01" + b"\x4d\x01\x02\x03\x04" + b"\x51" + b"\x00" * 8
    assert _wire.batch_ids_response(extra + packed + extra) == ids
    assert _wire.batch_ids_response(b"") == []
    assert _wire.next_id_response(b"\x09" + struct.pack("<Q", 42) + b"\x12\x00") == 42
    assert _wire.next_id_response(b"") == 0


@pytest.mark.parametrize(
    "broken",
    [b"\x09\x01\x02", b"\x0a\x10" + b"\x00" * 8, b"\x0a\x03\x00\x00\x00", b"\x0b", b"\x80", b"\x18"],
)
def test_broken_answers_are_refused(broken: bytes) -> None:
    with pytest.raises(_wire.WireError):
        _wire.batch_ids_response(broken)


def test_the_uuid_fields_are_the_protos() -> None:
    assert fields("NextUuidResponse") == {"uuid": ("bytes", 1), "text": ("string", 2)}
    assert fields("BatchUuidsRequest") == {"count": ("uint32", 1)}
    assert fields("BatchUuidsResponse") == {"uuids": ("repeated bytes", 1), "texts": ("repeated string", 2)}
    assert re.search(r"^message NextUuidRequest \{\}$", PROTO, re.M)
    assert re.search(r"rpc NextUuid\(NextUuidRequest\) returns \(NextUuidResponse\);", PROTO)
    assert re.search(r"rpc BatchUuids\(BatchUuidsRequest\) returns \(BatchUuidsResponse\);", PROTO)
    assert (_wire.NEXT_UUID, _wire.BATCH_UUIDS) == (
        "/snowmint.v1.IdService/NextUuid",
        "/snowmint.v1.IdService/BatchUuids",
    )


def test_uuid_requests() -> None:
    assert _wire.next_uuid_request() == b""
    assert _wire.batch_uuids_request(0) == b""
    assert _wire.batch_uuids_request(1) == b"\x08\x01"
    assert _wire.batch_uuids_request(65_536) == b"\x08\x80\x80\x04"
    with pytest.raises(ValueError):
        _wire.batch_uuids_request(-1)


def length_delimited(field: int, value: bytes) -> bytes:
    assert len(value) < 128
    return bytes([field << 3 | 2, len(value)]) + value


UUIDS = [
    uuid.UUID("019b76da-a800-7000-8000-000000000000"),
    uuid.UUID("019b76da-a801-7000-80c0-0004ddc55174"),
    uuid.UUID("ffffffff-ffff-ffff-ffff-ffffffffffff"),
]


def test_uuid_answers_with_their_texts_and_fields_unknown_here() -> None:
    texts = b"".join(length_delimited(2, str(u).encode()) for u in UUIDS)
    uuids = b"".join(length_delimited(1, u.bytes) for u in UUIDS)
    # A varint field 3, a fixed32 field 9 and a fixed64 field 10, unknown here.
    extra = b"\x18\x96\x01" + b"\x4d\x01\x02\x03\x04" + b"\x51" + b"\x00" * 8
    assert _wire.batch_uuids_response(uuids + texts) == UUIDS
    assert _wire.batch_uuids_response(extra + texts + uuids + extra) == UUIDS
    # The texts interleaved with the UUIDs, as a writer may put them.
    interleaved = b"".join(length_delimited(1, u.bytes) + length_delimited(2, str(u).encode()) for u in UUIDS)
    assert _wire.batch_uuids_response(interleaved) == UUIDS
    assert _wire.batch_uuids_response(b"") == []
    one = UUIDS[1]
    assert _wire.next_uuid_response(length_delimited(1, one.bytes) + length_delimited(2, str(one).encode())) == one
    assert _wire.next_uuid_response(extra + length_delimited(2, b"x") + length_delimited(1, one.bytes)) == one
    # A repeated singular field: the last value wins.
    assert _wire.next_uuid_response(length_delimited(1, UUIDS[0].bytes) + length_delimited(1, one.bytes)) == one


@pytest.mark.parametrize(
    "broken",
    [
        length_delimited(1, b""),
        length_delimited(1, b"\x01" * 15),
        length_delimited(1, b"\x01" * 17),
        b"\x0a\x10" + b"\x00" * 15,  # runs past the message
        b"\x0a",
        b"\x0b",
    ],
)
def test_broken_uuid_answers_are_refused(broken: bytes) -> None:
    with pytest.raises(_wire.WireError):
        _wire.next_uuid_response(broken)
    with pytest.raises(_wire.WireError):
        _wire.batch_uuids_response(length_delimited(1, UUIDS[0].bytes) + broken)


def test_a_next_uuid_answer_without_a_uuid_is_refused() -> None:
    for empty in (b"", length_delimited(2, b"019b76da-a800-7000-8000-000000000000")):
        with pytest.raises(_wire.WireError, match="0 bytes"):
            _wire.next_uuid_response(empty)


def test_the_sequence_fields_are_the_protos() -> None:
    assert fields("NextValueRequest") == {"sequence": ("string", 1)}
    assert fields("NextValueResponse") == {"value": ("int64", 1), "ordered": ("bool", 2)}
    assert fields("BatchValuesRequest") == {"sequence": ("string", 1), "count": ("uint32", 2)}
    assert fields("BatchValuesResponse") == {"values": ("repeated int64", 1), "ordered": ("bool", 2)}
    assert re.search(r"rpc NextValue\(NextValueRequest\) returns \(NextValueResponse\);", PROTO)
    assert re.search(r"rpc BatchValues\(BatchValuesRequest\) returns \(BatchValuesResponse\);", PROTO)
    assert (_wire.NEXT_VALUE, _wire.BATCH_VALUES) == (
        "/snowmint.v1.IdService/NextValue",
        "/snowmint.v1.IdService/BatchValues",
    )


def test_sequence_requests_and_answers() -> None:
    assert _wire.next_value_request("orders") == b"\x0a\x06orders"
    assert _wire.batch_values_request("a", 300) == b"\x0a\x01a\x10\xac\x02"
    assert _wire.batch_values_request("a", 0) == b"\x0a\x01a"
    assert _wire.next_value_response(b"\x08\x2a") == 42
    packed = b"\x0a\x04\x01\x02\xff\x01"
    assert _wire.batch_values_response(packed) == [1, 2, 255]
    assert _wire.batch_values_response(b"\x08\x01\x08\x02" + b"\x12\x00") == [1, 2]
    assert _wire.batch_values_response(b"") == []
    assert not _wire.ordered(b"\x08\x2a") and not _wire.ordered(b"\x08\x2a\x10\x00")
    assert _wire.ordered(b"\x08\x2a\x10\x01") and _wire.ordered(packed + b"\x10\x01")
    for broken in [b"", b"\x08\x00", b"\x08" + b"\xff" * 9 + b"\x01"]:
        with pytest.raises(_wire.WireError):
            _wire.next_value_response(broken)
    for broken in [b"\x08\x02\x08\x01", b"\x0a\x02\x01", b"\x08\x01\x08\x01"]:
        with pytest.raises(_wire.WireError):
            _wire.batch_values_response(broken)


def varint(value: int) -> bytes:
    """A varint, negative values as 10 bytes of two's complement, as protobuf writes them."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(number: int, value: bytes | int) -> bytes:
    """One field: a varint for an int, length-delimited for bytes."""
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    return varint(number << 3 | 2) + varint(len(value)) + value


RETRY_INFO_URL = b"type.googleapis.com/google.rpc.RetryInfo"


def detail(type_url: bytes, value: bytes) -> bytes:
    """google.rpc.Status's field 3: one google.protobuf.Any."""
    return field(3, field(1, type_url) + field(2, value))


def retry_info(seconds: int, nanos: int) -> bytes:
    return detail(RETRY_INFO_URL, field(1, field(1, seconds) + field(2, nanos)))


ERROR_INFO = detail(b"type.googleapis.com/google.rpc.ErrorInfo", field(1, b"QUOTA") + field(2, b"snowmint"))
STATUS = field(1, 8) + field(2, b"over quota")

# A server's own: a refusal of tenant a (rate 5, burst 1), read off the wire.
FROM_THE_SERVER = (
    b'\x08\x08\x12;tenant "a" is over its quota of 5 a second; retry in 180 ms'
    b"\x1a3\n(type.googleapis.com/google.rpc.RetryInfo\x12\x07\n\x05\x10\x80\xaa\xeaU"
)


def test_the_retry_delay_of_a_status() -> None:
    assert _wire.retry_delay(FROM_THE_SERVER) == pytest.approx(0.18)
    assert _wire.retry_delay(STATUS + retry_info(1, 500_000_000)) == pytest.approx(1.5)
    # After other details, and with fields unknown here around it.
    unknown = field(9, 1) + field(10, b"x")
    assert _wire.retry_delay(STATUS + ERROR_INFO + unknown + retry_info(0, 250_000_000)) == pytest.approx(0.25)
    # The first RetryInfo that gives a delay; a type URL of any host.
    assert _wire.retry_delay(detail(b"google.rpc.RetryInfo", b"") + retry_info(2, 0)) == 2.0
    assert _wire.retry_delay(detail(b"example.com/google.rpc.RetryInfo", field(1, b""))) == 0.0
    assert _wire.retry_delay(retry_info(3, 0) + retry_info(4, 0)) == 3.0


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        STATUS,
        STATUS + ERROR_INFO,
        detail(RETRY_INFO_URL, b""),  # a RetryInfo without a delay
        detail(b"type.googleapis.com/google.rpc.RetryInfoX", field(1, field(1, 1))),
        detail(b"type.googleapis.com/google.rpc.ErrorInfo", field(1, field(1, 1))),
        field(3, 5) + field(4, retry_info(1, 0)),  # RetryInfo-like bytes in the wrong fields
    ],
    ids=["empty", "status", "error-info", "no-delay", "other-url", "error-info-shaped", "wrong-fields"],
)
def test_a_status_without_a_retry_info_gives_no_delay(blob: bytes) -> None:
    assert _wire.retry_delay(blob) is None


@pytest.mark.parametrize(
    "blob",
    [
        b"\xff",
        b"\x1a\x05ab",  # runs past the blob
        STATUS + b"\x1f",  # wire type 7
        detail(b"\xff\xfe", b"") + retry_info(1, 0),  # a type URL that is not UTF-8
        retry_info(-1, 0),
        retry_info(1, 1_000_000_000),
        retry_info(0, -1),
        detail(RETRY_INFO_URL, field(1, b"\x08")),  # a Duration cut short
        detail(RETRY_INFO_URL, field(1, field(2, 1 << 40))),  # nanos beyond int32
        retry_info(1, 0)[:-1],
    ],
    ids=[
        "byte",
        "past-the-end",
        "wire-type",
        "not-utf8",
        "negative",
        "nanos-too-many",
        "nanos-negative",
        "cut-duration",
        "nanos-int64",
        "cut-status",
    ],
)
def test_a_malformed_status_gives_no_delay(blob: bytes) -> None:
    assert _wire.retry_delay(blob) is None


def test_garbage_never_raises() -> None:
    rng = random.Random(7)
    good = STATUS + ERROR_INFO + retry_info(1, 5)
    for _ in range(2000):
        blob = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            blob[rng.randrange(len(blob))] = rng.randrange(256)
        for garbage in (bytes(blob[: rng.randint(0, len(blob))]), rng.randbytes(rng.randint(0, 64))):
            delay = _wire.retry_delay(garbage)
            assert delay is None or delay >= 0


class Refusal(grpc.RpcError):
    """An attempt's error as grpc raises it: a code and trailing metadata."""

    def __init__(self, code: grpc.StatusCode, trailers: Any) -> None:
        self._code, self._trailers = code, trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def trailing_metadata(self) -> Any:
        return self._trailers


def test_the_quota_delay_of_an_error() -> None:
    exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
    trailer = (_wire.STATUS_DETAILS, FROM_THE_SERVER)
    # The blocking client's tuples, and the asyncio client's Metadata.
    assert _wire.quota_delay(Refusal(exhausted, (("x-other", "1"), trailer))) == pytest.approx(0.18)
    assert _wire.quota_delay(Refusal(exhausted, grpc.aio.Metadata(trailer))) == pytest.approx(0.18)
    # Only RESOURCE_EXHAUSTED waits; without the trailer, or with one of no RetryInfo, none.
    assert _wire.quota_delay(Refusal(grpc.StatusCode.UNAVAILABLE, (trailer,))) is None
    assert _wire.quota_delay(Refusal(exhausted, ())) is None
    assert _wire.quota_delay(Refusal(exhausted, None)) is None
    assert _wire.quota_delay(Refusal(exhausted, ((_wire.STATUS_DETAILS, STATUS + ERROR_INFO),))) is None
    assert _wire.quota_delay(Refusal(exhausted, ((_wire.STATUS_DETAILS, b"\xff"),))) is None
