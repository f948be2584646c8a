"""Real snowmint servers for the suite: the binary from $SNOWMINT_BIN (or the checkout's debug
build), standalone, on loopback ports, each in its own process group and killed with it when
the suite ends, whatever the outcome. Also the certificates of a mutual-TLS server, and a
tenants' policy with its tokens."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections import deque
from datetime import UTC, datetime, timedelta
from pathlib import Path

from drivers import ROOT, target_dir

STARTUP_TIMEOUT = 30.0


def binary() -> str:
    path = Path(os.environ.get("SNOWMINT_BIN") or target_dir() / "debug" / "snowmint")
    if not path.is_file():
        raise SystemExit(f"no snowmint binary at {path}: set SNOWMINT_BIN or run cargo build --locked --bin snowmint")
    return str(path)


class Server:
    """One `snowmint serve`, which can be stopped, paused and started again on its address."""

    def __init__(
        self,
        worker_id: int,
        *extra: str,
        state_dir: Path | None = None,
        refusing: bool = False,
        sequences: dict[str, list[str]] | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.extra = list(extra)
        self._own_dir = state_dir is None
        self.state_dir = Path(tempfile.mkdtemp(prefix="snowmint-conformance-")) if state_dir is None else state_dir
        if refusing:
            write_refusing_state(self.state_dir, worker_id)
        # Named sequences, made with `snowmint sequence create NAME --state-dir DIR FLAGS...`.
        for name, flags in (sequences or {}).items():
            command = [binary(), "sequence", "create", name, "--state-dir", str(self.state_dir), *flags]
            subprocess.run(command, check=True, capture_output=True, timeout=30)
        self.grpc_addr = ""
        self.admin_addr = ""
        self._logs: deque[str] = deque(maxlen=60)
        self._proc: subprocess.Popen[str] | None = None
        self.start("127.0.0.1:0")

    def start(self, listen: str | None = None) -> None:
        """Starts the process (again, on its own address unless told otherwise) and waits
        until it listens."""
        listen = listen or self.grpc_addr
        self._proc = subprocess.Popen(
            [
                binary(),
                "serve",
                "--listen",
                listen,
                "--admin-listen",
                "127.0.0.1:0",
                "--log-format",
                "json",
                "--state-dir",
                str(self.state_dir),
                "--worker-id",
                str(self.worker_id),
                *self.extra,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        found: queue.Queue[tuple[str, str] | None] = queue.Queue()
        threading.Thread(target=self._read_stderr, args=(self._proc, found), daemon=True).start()
        try:
            addrs = found.get(timeout=STARTUP_TIMEOUT)
        except queue.Empty:
            self.kill()
            raise RuntimeError(f"snowmint did not listen within {STARTUP_TIMEOUT} s:\n{self.logs()}") from None
        if addrs is None:
            self.kill()
            raise RuntimeError(f"snowmint exited before it listened:\n{self.logs()}")
        self.grpc_addr, self.admin_addr = addrs

    def _read_stderr(self, proc: subprocess.Popen[str], found: queue.Queue[tuple[str, str] | None]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self._logs.append(line.rstrip())
            try:
                fields = json.loads(line)
            except ValueError:
                continue
            if isinstance(fields, dict) and "grpc_addr" in fields and "admin_addr" in fields:
                found.put((fields["grpc_addr"], fields["admin_addr"]))
        found.put(None)  # The process ended (or closed its stderr): it will not listen now.

    def logs(self) -> str:
        return "\n".join(self._logs)

    @property
    def url(self) -> str:
        return f"http://{self.grpc_addr}"

    def signal(self, sig: signal.Signals) -> None:
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL, as a crash (a stopped process too, which never runs again); waits until
        the process is gone."""
        self.signal(signal.SIGKILL)
        if self._proc is not None:
            self._proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, as a rolling restart does; waits until the process is gone."""
        self.signal(signal.SIGTERM)
        if self._proc is not None:
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def pause(self) -> None:
        """SIGSTOP, and waits until every thread has stopped: connections stay open, nothing
        answers."""
        self.signal(signal.SIGSTOP)
        assert self._proc is not None
        tasks = Path(f"/proc/{self._proc.pid}/task")
        limit = time.monotonic() + 10
        while not all(_stopped(task) for task in tasks.iterdir()):
            if time.monotonic() > limit:
                raise RuntimeError(f"snowmint {self._proc.pid} did not stop within 10 s of SIGSTOP")
            time.sleep(0.005)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def metrics(self) -> dict[str, float]:
        """Every series of /metrics, by its name with labels."""
        with urllib.request.urlopen(f"http://{self.admin_addr}/metrics", timeout=5) as response:
            text: str = response.read().decode()
        series = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                series[name] = float(value)
        return series

    def requests(self, method: str, code: str | None = None) -> int:
        """Calls of ``method`` the server answered (with ``code``, or any)."""
        total = 0.0
        for name, value in self.metrics().items():
            if (
                name.startswith("snowmint_requests_total{")
                and f'method="{method}"' in name
                and 'protocol="grpc"' in name
                and (code is None or f'code="{code}"' in name)
            ):
                total += value
        return int(total)

    def issued(self) -> int:
        """IDs the server handed out."""
        return int(self.metrics()["snowmint_ids_issued_total"])

    def close(self) -> None:
        self.kill()
        if self._own_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)


def _stopped(task: Path) -> bool:
    try:
        stat = (task / "stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "T"


def write_refusing_state(state_dir: Path, worker_id: int) -> None:
    """A state file whose reservation is an hour ahead of the clock: a server started on it
    mints nothing for that hour, and refuses with UNAVAILABLE."""
    now = datetime.now(UTC)
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


class Certificates:
    """A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate, all
    signed by the CA (EC P-256, PKCS#8 keys), made with openssl in a temp dir."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="snowmint-conformance-tls-"))
        self.ca, self.ca_key = self.dir / "ca.pem", self.dir / "ca-key.pem"
        self.server, self.server_key = self.dir / "server.pem", self.dir / "server-key.pem"
        self.client, self.client_key = self.dir / "client.pem", self.dir / "client-key.pem"
        self._openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", self.ca_key)
        self._openssl(
            "req", "-x509", "-new", "-key", self.ca_key, "-subj", "/CN=snowmint conformance CA", "-days", "2",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-out", self.ca,
        )  # fmt: skip
        self._leaf("server", self.server, self.server_key, "subjectAltName=IP:127.0.0.1,DNS:localhost", "serverAuth")
        self._leaf("client", self.client, self.client_key, "subjectAltName=DNS:conformance-client", "clientAuth")

    def _leaf(self, name: str, cert: Path, key: Path, san: str, usage: str) -> None:
        csr = self.dir / f"{name}.csr"
        ext = self.dir / f"{name}.ext"
        ext.write_text(f"{san}\nextendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n")
        self._openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key)
        self._openssl("req", "-new", "-key", key, "-subj", f"/CN=snowmint conformance {name}", "-out", csr)
        self._openssl(
            "x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key, "-CAcreateserial", "-days", "2",
            "-extfile", ext, "-out", cert,
        )  # fmt: skip

    @staticmethod
    def _openssl(*args: str | Path) -> None:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=30)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class TenantFiles:
    """Tenants' policies and their token file in a temp dir, with a token made by
    `snowmint token new` for each of ``token_names``."""

    def __init__(self, token_names: list[str]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="snowmint-conformance-tenants-"))
        self.tokens = self.dir / "tokens"
        self._tokens: dict[str, str] = {}
        lines = []
        for name in token_names:
            made = subprocess.run(
                [binary(), "token", "new", name], check=True, capture_output=True, text=True, timeout=30
            ).stdout.splitlines()
            self._tokens[name] = made[0]
            lines.append(made[1])
        self.tokens.write_text("".join(line + "\n" for line in lines))
        self._policies = itertools.count(1)

    def token(self, name: str) -> str:
        return self._tokens[name]

    def serve_args(self, policy: str) -> list[str]:
        """The flags of a server with ``policy`` (written to a file of its own) and the tokens."""
        path = self.dir / f"policy-{next(self._policies)}.toml"
        path.write_text(policy)
        return ["--policy-file", str(path), "--token-file", str(self.tokens)]

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


__all__ = ["ROOT", "Certificates", "Server", "TenantFiles", "binary", "write_refusing_state"]
