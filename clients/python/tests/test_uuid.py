"""UUIDv7s, locally: the strict text form and decoding with a layout agree with the Rust
implementation on every shared test vector (clients/testdata/uuid-vectors.json), and a
malformed answer to a UUID call raises the client's own error."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from test_vectors import layout_of

from snowmint_client import (
    DEFAULT_LAYOUT,
    AsyncClient,
    Client,
    DecodedUuid,
    Layout,
    SnowmintError,
    UuidDecodeError,
    WireError,
    decode,
    decode_uuid,
    format_uuid,
    parse_uuid,
)

UUID_VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "testdata" / "uuid-vectors.json").read_text()
)


def test_every_vector_parses_decodes_and_formats() -> None:
    assert UUID_VECTORS["vectors"]
    for v in UUID_VECTORS["vectors"]:
        layout, text = layout_of(v["layout"]), v["uuid"]
        u = parse_uuid(text)
        assert u.version == 7 and u.variant == uuid.RFC_4122, text
        d = layout.decode_uuid(u)
        got = (str(d.id), d.unix_ms, d.slot, d.sequence, d.random)
        want = (v["id"], int(v["unix_ms"]), v["slot"], v["sequence"], v["random"])
        assert got == want, f"{v['layout']} {text}"
        assert decode_uuid(u, layout) == d
        assert format_uuid(u) == str(u) == text
        assert parse_uuid(text.upper()) == u
        # The ID the UUID was made from splits into the same time, slot and sequence.
        id = decode(d.id, layout)
        assert (id.unix_ms, id.worker_id, id.sequence) == (d.unix_ms, d.slot, d.sequence), text


def test_every_invalid_uuid_is_refused_with_its_kind() -> None:
    assert UUID_VECTORS["invalid"]
    kinds = set()
    for v in UUID_VECTORS["invalid"]:
        with pytest.raises(UuidDecodeError) as refused:
            layout_of(v["layout"]).decode_uuid(parse_uuid(v["uuid"]))
        assert refused.value.kind == v["kind"], f"{v['layout']} {v['uuid']}: {v['reason']}"
        assert isinstance(refused.value, ValueError)
        kinds.add(v["kind"])
    assert kinds == {"version", "variant", "fields", "tick"}


def test_every_malformed_text_is_refused() -> None:
    assert UUID_VECTORS["malformed"]
    for v in UUID_VECTORS["malformed"]:
        with pytest.raises(ValueError) as refused:
            parse_uuid(v["text"])
        assert isinstance(refused.value, UuidDecodeError) and refused.value.kind == "text", v["reason"]


def test_parse_uuid_is_stricter_than_the_standard_library() -> None:
    text = "0190163d-8694-739b-aea5-6d2a3f0b1c4e"
    u = parse_uuid(text)
    assert u == uuid.UUID(text)
    assert parse_uuid("0190163D-8694-739b-AEA5-6d2a3f0b1C4E") == u
    for lenient in (text.replace("-", ""), "{" + text + "}", "urn:uuid:" + text):
        assert uuid.UUID(lenient) == u
        with pytest.raises(UuidDecodeError):
            parse_uuid(lenient)
    # Characters that str.isdigit() or int(..., 16) might let through.
    for odd in ("\u0660", "\uff10", "_"):
        with pytest.raises(UuidDecodeError):
            parse_uuid(odd + text[1:])
    with pytest.raises(TypeError):
        parse_uuid(u.bytes)  # type: ignore[arg-type]


def test_decode_uuid_uses_the_default_layout_and_gives_a_frozen_value() -> None:
    u = parse_uuid("019b76da-a801-7000-80c0-0004ddc55174")
    d = decode_uuid(u)
    assert d == DEFAULT_LAYOUT.decode_uuid(u) == Layout.snowmint().decode_uuid(u)
    assert d == DecodedUuid(id=4206596, unix_ms=1767225600001, slot=3, sequence=4, random=3720696180)
    assert d.time.isoformat(timespec="milliseconds") == "2026-01-01T00:00:00.001+00:00"
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.slot = 4  # type: ignore[misc]


def test_a_time_past_the_layouts_range_is_refused() -> None:
    # Tick 2**41 of the default layout: one past its last.
    unix_ms = DEFAULT_LAYOUT.epoch_ms + (1 << 41)
    u = uuid.UUID(int=unix_ms << 80 | 7 << 76 | 0b10 << 62)
    with pytest.raises(UuidDecodeError) as refused:
        decode_uuid(u)
    assert refused.value.kind == "tick"
    assert decode_uuid(uuid.UUID(int=(unix_ms - 1) << 80 | 7 << 76 | 0b10 << 62)).id == (1 << 63) - (1 << 22)


@pytest.fixture
def malformed_server() -> Iterator[str]:
    """A gRPC server that answers NextUuid with a 15-byte UUID and BatchUuids with a good UUID,
    then a 17-byte one."""
    good = uuid.UUID("019b76da-a801-7000-80c0-0004ddc55174").bytes

    def next_uuid(request: bytes, context: grpc.ServicerContext) -> bytes:
        return b"\x0a\x0f" + good[:15]

    def batch_uuids(request: bytes, context: grpc.ServicerContext) -> bytes:
        return b"\x0a\x10" + good + b"\x0a\x11" + good + b"\x00"

    handler = grpc.method_handlers_generic_handler(
        "snowmint.v1.IdService",
        {
            "NextUuid": grpc.unary_unary_rpc_method_handler(next_uuid),
            "BatchUuids": grpc.unary_unary_rpc_method_handler(batch_uuids),
        },
    )
    server = grpc.server(ThreadPoolExecutor(2), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def test_a_malformed_answer_raises_the_clients_error(malformed_server: str) -> None:
    with Client([malformed_server]) as client:
        with pytest.raises(WireError, match="15 bytes") as error:
            client.next_uuid()
        assert isinstance(error.value, SnowmintError)
        with pytest.raises(WireError, match="17 bytes"):
            client.batch_uuids(2)

    async def run() -> None:
        async with AsyncClient([malformed_server]) as client:
            with pytest.raises(WireError, match="15 bytes"):
                await client.next_uuid()
            with pytest.raises(WireError, match="17 bytes"):
                await client.batch_uuids(2)

    asyncio.run(run())
