"""Real snowmint servers for the tests: the binary from $SNOWMINT_BIN (or the checkout's debug
build, which test.sh makes), standalone, on free loopback ports, each killed with its process
group when its test ends, whatever the outcome."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from snowmint_client import parse_uuid

ROOT = Path(__file__).resolve().parents[3]
STARTUP_TIMEOUT = 30.0

# Killed should the test process die first: util-linux's setpriv sets the parent-death signal
# and execs the server. Not a preexec_fn: Python code run between fork and exec can deadlock
# in a process whose other threads (gRPC's) hold locks, and then the server never starts.
_DIE_WITH_PARENT = ("setpriv", "--pdeathsig", "KILL", "--")


class Server:
    """One running `snowmint serve`."""

    def __init__(self, binary: str, worker_id: int, state_dir: Path, extra: tuple[str, ...] = ()) -> None:
        self.proc = subprocess.Popen(
            [
                *_DIE_WITH_PARENT,
                binary,
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
                "--log-format",
                "json",
                "--state-dir",
                str(state_dir),
                "--worker-id",
                str(worker_id),
                *extra,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, killed whole in teardown
        )
        self._logs: deque[str] = deque(maxlen=50)
        found: queue.Queue[tuple[str, str]] = queue.Queue()
        threading.Thread(target=self._read_stderr, args=(found,), daemon=True).start()
        try:
            self.grpc_addr, self.admin_addr = found.get(timeout=STARTUP_TIMEOUT)
        except queue.Empty:
            self.kill()
            raise RuntimeError(
                f"snowmint did not listen within {STARTUP_TIMEOUT} s; stderr:\n{self.stderr()}"
            ) from None

    def _read_stderr(self, found: queue.Queue[tuple[str, str]]) -> None:
        # Read every line until the pipe closes, so the server never blocks on a full pipe.
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._logs.append(line.rstrip())
            try:
                fields = json.loads(line)
            except ValueError:
                continue
            if isinstance(fields, dict) and "grpc_addr" in fields and "admin_addr" in fields:
                found.put((fields["grpc_addr"], fields["admin_addr"]))

    def stderr(self) -> str:
        return "\n".join(self._logs)

    def kill(self) -> None:
        """SIGKILL to the server's process group; waits for it to exit."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP to the server's process group: its connections stay open, nothing answers.
        The kill at the end of the test ends it all the same."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://{self.admin_addr}/metrics", timeout=5) as response:
            text: str = response.read().decode()
        return text

    def requests(self, method: str) -> int:
        """The server's snowmint_requests_total for ``method``, over every code."""
        return sum(
            int(float(line.rsplit(" ", 1)[1]))
            for line in self.metrics().splitlines()
            if line.startswith("snowmint_requests_total{") and f'method="{method}"' in line
        )

    def issued(self) -> int:
        """The IDs the server handed out (snowmint_ids_issued_total)."""
        for line in self.metrics().splitlines():
            if line.startswith("snowmint_ids_issued_total "):
                return int(float(line.rsplit(" ", 1)[1]))
        raise AssertionError("no snowmint_ids_issued_total")


@pytest.fixture(scope="session")
def snowmint_bin() -> str:
    path = Path(os.environ.get("SNOWMINT_BIN") or ROOT / "target" / "debug" / "snowmint")
    if not path.is_file():
        pytest.fail(f"no snowmint binary at {path}: set SNOWMINT_BIN or run cargo build --locked --bin snowmint")
    return str(path)


StartServer = Callable[..., Server]


@pytest.fixture
def start_server(snowmint_bin: str) -> Iterator[StartServer]:
    """Starts servers: ``start_server(worker_id, state_dir=None, *extra_flags)``; a fresh temp
    state dir when none is given. Every server and temp dir goes when the test ends."""
    servers: list[Server] = []
    dirs: list[tempfile.TemporaryDirectory[str]] = []

    def start(worker_id: int, state_dir: Path | None = None, *extra: str) -> Server:
        if state_dir is None:
            dirs.append(tempfile.TemporaryDirectory(prefix="snowmint-state-"))
            state_dir = Path(dirs[-1].name)
        server = Server(snowmint_bin, worker_id, state_dir, extra)
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.kill()
        for d in dirs:
            d.cleanup()


def write_refusing_state(state_dir: Path, worker_id: int) -> None:
    """A state file whose reservation is an hour ahead of the clock: a server started on it
    must mint nothing for that hour, so it refuses with UNAVAILABLE."""
    now = datetime.now(timezone.utc)
    until = now + timedelta(hours=1)
    state = {
        "version": 1,
        "worker_id": worker_id,
        "layout": {
            "name": "snowmint",
            "epoch_ms": 1767225600000,
            "tick_ms": 1,
            "time_bits": 41,
            "worker_bits": 10,
            "sequence_bits": 12,
            "order": "worker_sequence",
        },
        "reserved_until_ms": int(until.timestamp() * 1000),
        "reserved_until": until.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "saved_at": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }
    (state_dir / f"worker-{worker_id}.json").write_text(json.dumps(state))


def assert_unique(ids: list[int]) -> None:
    assert len(set(ids)) == len(ids), f"{len(ids) - len(set(ids))} IDs handed out twice among {len(ids)}"


def assert_increasing(ids: list[int]) -> None:
    for a, b in itertools.pairwise(ids):
        assert a < b, f"batch not strictly increasing: {a} then {b}"


def assert_uuids_increase(uuids: list[uuid.UUID]) -> None:
    """Strictly increasing, hence distinct, as values, as bytes and as their text forms."""
    assert_increasing([u.int for u in uuids])
    assert len({u.bytes for u in uuids}) == len(uuids)
    texts = [str(u) for u in uuids]
    assert sorted(texts) == texts
    assert all(parse_uuid(t) == u for t, u in zip(texts, uuids, strict=True))
