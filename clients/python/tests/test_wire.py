"""The client's own encoding of its calls (_wire.py): the fields it reads and writes are
those of proto/snowmint/v1/snowmint.proto, and it reads what any protobuf writer may send."""

from __future__ import annotations

import re
import struct
import uuid
from pathlib import Path

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
