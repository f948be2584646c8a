"""The string form of opaque IDs agrees with the Rust implementation on every shared vector."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from snowmint_client import OpaqueId, OpaqueIdError

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "testdata" / "opaque-strings.json").read_text(encoding="utf-8")
)


def test_every_valid_string_reads_and_writes() -> None:
    assert VECTORS["valid"]
    for v in VECTORS["valid"]:
        opaque = OpaqueId.of(v["key_version"], int(v["value"]))
        assert str(opaque) == v["text"]
        assert OpaqueId.parse(v["text"]) == opaque


def test_every_alias_reads_as_its_canonical_string() -> None:
    assert VECTORS["aliases"]
    for v in VECTORS["aliases"]:
        opaque = OpaqueId.parse(v["text"])
        assert opaque == OpaqueId(v["key_version"], int(v["value"])), v["text"]
        assert str(opaque) == v["canonical"]


def test_every_invalid_string_is_refused_by_the_first_check_it_fails() -> None:
    assert VECTORS["invalid"]
    for v in VECTORS["invalid"]:
        with pytest.raises(OpaqueIdError) as error:
            OpaqueId.parse(v["text"])
        assert error.value.kind == v["kind"], f"{v['text']!r}: {v['reason']}"


def test_every_unencodable_pair_is_refused() -> None:
    assert VECTORS["unencodable"]
    for v in VECTORS["unencodable"]:
        with pytest.raises(OpaqueIdError):
            OpaqueId.of(v["key_version"], int(v["value"]))
