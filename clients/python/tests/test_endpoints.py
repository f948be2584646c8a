"""Bad endpoints and settings are refused when the client is made, not at the first call."""

from __future__ import annotations

import pytest

from snowmint_client import AsyncClient, BufferConfig, Client


@pytest.mark.parametrize("endpoint", ["", "http://", "https://", "ftp://host:1", "http://host:1/path"])
def test_bad_endpoints_are_refused(endpoint: str) -> None:
    with pytest.raises(ValueError, match="endpoint"):
        Client([endpoint])


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="no endpoints"):
        Client([])
    with pytest.raises(ValueError, match="timeout"):
        Client(["127.0.0.1:1"], timeout=0)
    with pytest.raises(ValueError, match="max_age"):
        BufferConfig(max_age=0)


def test_a_string_is_not_a_list_of_endpoints() -> None:
    # Iterated, "127.0.0.1:1" would be eleven endpoints of one character each (issue 30).
    with pytest.raises(TypeError, match="list of endpoints"):
        Client("127.0.0.1:1")
    with pytest.raises(TypeError, match="list of endpoints"):
        AsyncClient("127.0.0.1:1")
