"""The quick starts in clients/README.md are the files in examples/, and they run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import StartServer

HERE = Path(__file__).resolve().parents[1]
README = HERE.parent / "README.md"


def snippet(name: str) -> str:
    """The code block after ``<!-- snippet: name -->`` in clients/README.md."""
    pattern = rf"<!-- snippet: {re.escape(name)} -->\n```[a-z]*\n(.*?)```\n<!-- end snippet -->"
    match = re.search(pattern, README.read_text(), re.DOTALL)
    assert match, f"clients/README.md has no snippet {name}"
    return match.group(1)


@pytest.mark.parametrize(
    ("example", "expect"),
    [
        ("quickstart.py", ["by worker 9, sequence", "batch: [", '{"id": "']),
        ("quickstart_async.py", ["100 distinct IDs"]),
    ],
)
def test_the_quick_start_is_the_readmes_and_runs(start_server: StartServer, example: str, expect: list[str]) -> None:
    path = HERE / "examples" / example
    assert snippet(f"python/examples/{example}") == path.read_text(), (
        f"the quick start in clients/README.md differs from examples/{example}: copy the file into the page"
    )
    server = start_server(9)
    env = {**os.environ, "SNOWMINT_ENDPOINTS": server.grpc_addr}
    run = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    for text in expect:
        assert text in run.stdout, run.stdout
