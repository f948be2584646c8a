"""Local decoding agrees with the Rust implementation on every shared test vector."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from snowmint_client import DEFAULT_LAYOUT, Layout, NotThisLayoutError, decode

VECTORS: dict[str, Any] = json.loads((Path(__file__).resolve().parents[2] / "testdata" / "vectors.json").read_text())


def layout_of(name: str) -> Layout:
    entry = VECTORS["layouts"][name]
    return Layout(
        name=name,
        epoch_ms=int(entry["epoch_ms"]),
        tick_ms=entry["tick_ms"],
        time_bits=entry["time_bits"],
        worker_bits=entry["worker_bits"],
        sequence_bits=entry["sequence_bits"],
        order=entry["order"],
    )


@pytest.mark.parametrize("name", ["snowmint", "twitter", "discord", "instagram", "sonyflake"])
def test_the_presets_are_the_vectors_layouts(name: str) -> None:
    assert Layout.named(name) == layout_of(name)


def test_the_default_layout_is_the_vectors_snowmint() -> None:
    assert DEFAULT_LAYOUT == layout_of("snowmint") == Layout.snowmint()


def test_decode_agrees_with_every_vector() -> None:
    assert VECTORS["vectors"]
    for v in VECTORS["vectors"]:
        d = decode(int(v["id"]), layout_of(v["layout"]))
        got = (str(d.unix_ms), str(d.tick), d.worker_id, d.sequence, d.rfc3339)
        want = (v["unix_ms"], v["tick"], v["worker_id"], v["sequence"], v["time"])
        assert got == want, f"{v['layout']} {v['id']}"
        assert d.id == int(v["id"])
        assert d.time.isoformat(timespec="milliseconds").replace("+00:00", "Z") == v["time"]


def test_decode_rejects_every_invalid_id() -> None:
    assert VECTORS["invalid"]
    for v in VECTORS["invalid"]:
        with pytest.raises(NotThisLayoutError):
            decode(int(v["id"]), layout_of(v["layout"]))


def test_an_unknown_layout_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="twitter, discord, instagram, sonyflake"):
        Layout.named("uuid")
