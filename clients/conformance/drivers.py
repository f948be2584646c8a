"""The client drivers: one long-running program per client, in the client's own language,
that the suite steers over its stdin and stdout, one JSON object a line.

A request is ``{"id": n, "op": ..., ...}``; the driver answers each with ``{"id": n, "ok":
true|false, "elapsed_ms": ..., ...}`` once the call it stands for has ended, and handles
requests concurrently, so a test can have calls waiting while it sends ``close``. The ops
(every driver has each):

- ``client`` {name, endpoints, timeout_ms?, attempts?, buffer?, sequence_prefetch?, tls?,
  token?}: makes a client. ``buffer`` is {batch, low_water, max_refills, max_age_ms};
  ``sequence_prefetch`` the values per sequence its ``next_value`` fetches ahead; ``tls`` is
  {ca, cert?, key?}, paths of PEM files; ``token`` the bearer token its calls carry. A
  setting the client refuses is the error ``invalid``.
- ``next_id`` {client, deadline_ms?} and ``batch`` {client, n, deadline_ms?}: one call, with
  the caller's own deadline when given; answer ``ids`` (decimal strings).
- ``burst`` {client, n}: n concurrent ``next_id`` calls; answer ``results``, each
  {ok, id | error}.
- ``loop`` {client, every_ms, duration_ms, deadline_ms?}: ``next_id`` calls one after another,
  each starting ``every_ms`` after the one before (or at once when that one took longer),
  for ``duration_ms``; answer ``calls``, each [start as Unix ms, elapsed ms, id or null,
  error kind or null].
- ``next_value`` {client, sequence, deadline_ms?}: one ``next_value`` of a named sequence;
  answer ``value`` (a decimal string).
- ``close`` {client}.
- ``decode`` {value, layout}: answer unix_ms, tick (strings), worker_id, sequence, time; or the
  error kind ``invalid``.
- ``opaque_format`` {key_version, value} and ``opaque_parse`` {text}: answer text, or
  key_version and value; or the error kind ``opaque`` with ``opaque_kind``.

An error is {kind, code, message}: kind ``unavailable`` (every attempt failed),
``deadline`` (the caller's deadline passed), ``closed``, ``rejected`` (a server's status as
it is, with its ``code``), ``invalid``, ``opaque`` or ``other``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import threading
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

Reply = dict[str, Any]


def target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")


def driver_command(client: str) -> list[str]:
    """The command that runs the driver of ``client``, as each client's build leaves it."""
    java = ROOT / "clients" / "java"
    python = ROOT / "clients" / "python" / ".venv" / "bin" / "python"
    python_driver = str(ROOT / "clients" / "python" / "conformance_driver.py")
    if client == "rust":
        return [str(target_dir() / "debug" / "examples" / "conformance")]
    if client == "go":
        return [str(ROOT / "clients" / "go" / ".bin" / "conformance")]
    if client == "java":
        classpath = (java / "target" / "classpath.txt").read_text().strip()
        return [
            "java",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{java}/target/classes:{java}/target/test-classes:{classpath}",
            "dev.snowmint.client.ConformanceDriver",
        ]
    if client == "python":
        return [str(python), python_driver]
    if client == "python-asyncio":
        return [str(python), python_driver, "--asyncio"]
    if client == "typescript":
        return ["node", str(ROOT / "clients" / "typescript" / "dist" / "conformance" / "driver.js")]
    raise ValueError(f"unknown client {client!r}")


CLIENTS = ["rust", "go", "java", "python", "python-asyncio", "typescript"]


class DriverError(Exception):
    """The driver died, or did not answer in time."""


class Driver:
    """One running driver. Requests may overlap; each gets its own answer."""

    def __init__(self, client: str) -> None:
        self.client = client
        self._proc = subprocess.Popen(
            driver_command(client),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self._ids = itertools.count(1)
        self._pending: dict[int, Future[Reply]] = {}
        self._lock = threading.Lock()
        self._stderr: deque[str] = deque(maxlen=40)
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                reply = json.loads(line)
            except ValueError:
                self._stderr.append(f"(stdout) {line.rstrip()}")
                continue
            with self._lock:
                future = self._pending.pop(reply.get("id"), None)
            if future is not None:
                future.set_result(reply)
        with self._lock:
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(DriverError(f"{self.client} driver exited; stderr:\n{self.stderr()}"))

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            self._stderr.append(line.rstrip())

    def stderr(self) -> str:
        return "\n".join(self._stderr)

    def send(self, op: str, **fields: Any) -> Future[Reply]:
        """Sends one request; its answer comes in the future."""
        request_id = next(self._ids)
        future: Future[Reply] = Future()
        with self._lock:
            self._pending[request_id] = future
        line = json.dumps({"id": request_id, "op": op, **fields})
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as error:
            with self._lock:
                self._pending.pop(request_id, None)
            raise DriverError(f"{self.client} driver is gone: {error}; stderr:\n{self.stderr()}") from error
        return future

    def call(self, op: str, timeout: float = 30.0, **fields: Any) -> Reply:
        """Sends one request and waits for its answer, up to ``timeout`` seconds."""
        future = self.send(op, **fields)
        try:
            return future.result(timeout)
        except TimeoutError:
            raise DriverError(f"{self.client} driver: no answer to {op} {fields} within {timeout} s") from None

    def close(self) -> None:
        """Ends the driver (stdin closed, then SIGKILL to its group after 5 s)."""
        with contextlib.suppress(OSError):
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait(timeout=10)
