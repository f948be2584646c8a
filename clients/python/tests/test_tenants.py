"""Bearer tokens and quota waits (clients/README.md, "Credentials" and "Quota waits") on both
clients, against real servers started with a policy and a token file: every call carries the
token, refusals of credentials and permissions come back as they are after one attempt, and a
refusal over the tenant's rate is waited out on the same endpoint, or returned at once when the
call could not use the wait."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc
import pytest
from conftest import Server, StartServer, write_refusing_state

from snowmint_client import AsyncClient, Client, ClientClosedError, quota_delay

T = TypeVar("T")

# Tenant a may wait 200 ms for its second ID of a burst; b may mint UUIDs only; c has every
# permission and no rate; slow waits a second.
POLICY = """
[tenant.a]
tokens = ["a"]
allow = ["ids", "uuids", "sequences"]
rate = 5
burst = 1

[tenant.b]
tokens = ["b"]
allow = ["uuids"]

[tenant.c]
tokens = ["c"]
allow = ["ids", "uuids", "sequences"]

[tenant.slow]
tokens = ["slow"]
allow = ["ids"]
rate = 1
burst = 1
"""

# A token of the right form that the token file does not hold.
UNKNOWN_TOKEN = "smt_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH"


@dataclass(frozen=True)
class Tenants:
    """The tenants' tokens, by name, and the server flags of their policy."""

    tokens: dict[str, str]
    flags: tuple[str, ...]


@pytest.fixture
def tenants(snowmint_bin: str, tmp_path: Path) -> Tenants:
    tokens: dict[str, str] = {}
    lines: list[str] = []
    for name in ("a", "b", "c", "slow"):
        made = subprocess.run([snowmint_bin, "token", "new", name], check=True, capture_output=True, text=True)
        token, line = made.stdout.splitlines()[:2]
        tokens[name] = token
        lines.append(line)
    (tmp_path / "tokens").write_text("\n".join(lines) + "\n")
    (tmp_path / "policy.toml").write_text(POLICY)
    flags = ("--policy-file", str(tmp_path / "policy.toml"), "--token-file", str(tmp_path / "tokens"))
    return Tenants(tokens, flags)


class Calls(Protocol):
    """The calls of a client, blocking: :class:`Client` itself, or :class:`LoopClient`."""

    def next_id(self, *, timeout: float | None = None) -> int: ...
    def batch(self, n: int, *, timeout: float | None = None) -> list[int]: ...
    def next_uuid(self, *, timeout: float | None = None) -> uuid.UUID: ...
    def batch_uuids(self, n: int, *, timeout: float | None = None) -> list[uuid.UUID]: ...
    def next_value(self, name: str, *, timeout: float | None = None) -> int: ...
    def batch_values(self, name: str, n: int, *, timeout: float | None = None) -> list[int]: ...
    def close(self) -> None: ...


class LoopClient:
    """An :class:`AsyncClient` on an event loop of its own, called from the test's thread, so
    one test covers both clients."""

    def __init__(self, endpoints: list[str], **options: Any) -> None:
        self._loop = asyncio.new_event_loop()

        async def make() -> AsyncClient:
            return AsyncClient(endpoints, **options)

        self.client = self._loop.run_until_complete(make())

    def _run(self, call: Awaitable[T]) -> T:
        async def run() -> T:
            return await call

        return self._loop.run_until_complete(run())

    def next_id(self, *, timeout: float | None = None) -> int:
        return self._run(self.client.next_id(timeout=timeout))

    def batch(self, n: int, *, timeout: float | None = None) -> list[int]:
        return self._run(self.client.batch(n, timeout=timeout))

    def next_uuid(self, *, timeout: float | None = None) -> uuid.UUID:
        return self._run(self.client.next_uuid(timeout=timeout))

    def batch_uuids(self, n: int, *, timeout: float | None = None) -> list[uuid.UUID]:
        return self._run(self.client.batch_uuids(n, timeout=timeout))

    def next_value(self, name: str, *, timeout: float | None = None) -> int:
        return self._run(self.client.next_value(name, timeout=timeout))

    def batch_values(self, name: str, n: int, *, timeout: float | None = None) -> list[int]:
        return self._run(self.client.batch_values(name, n, timeout=timeout))

    def close(self) -> None:
        if not self._loop.is_closed():
            self._run(self.client.close())
            self._loop.close()


Connect = Callable[..., Calls]


@pytest.fixture(params=["blocking", "asyncio"])
def connect(request: pytest.FixtureRequest) -> Iterator[Connect]:
    """Makes clients of the test's kind: ``connect(endpoints, **options)``; each closed when
    the test ends."""
    made: list[Calls] = []

    def make(endpoints: list[str], **options: Any) -> Calls:
        client: Calls = (
            Client(endpoints, **options) if request.param == "blocking" else LoopClient(endpoints, **options)
        )
        made.append(client)
        return client

    try:
        yield make
    finally:
        for client in made:
            client.close()


def refused(call: Callable[[], object]) -> grpc.StatusCode:
    """The code of the ``grpc.RpcError`` the call raises."""
    with pytest.raises(grpc.RpcError) as error:
        call()
    code: grpc.StatusCode = error.value.code()
    return code


def unauthenticated(server: Server) -> int:
    """The calls the server refused UNAUTHENTICATED (snowmint_unauthenticated_calls_total)."""
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in server.metrics().splitlines()
        if line.startswith("snowmint_unauthenticated_calls_total{")
    )


def test_every_call_carries_the_token(
    start_server: StartServer, snowmint_bin: str, tmp_path: Path, tenants: Tenants, connect: Connect
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    subprocess.run(
        [snowmint_bin, "sequence", "create", "orders", "--state-dir", str(state)], check=True, capture_output=True
    )
    server = start_server(40, state, *tenants.flags)
    client = connect([server.grpc_addr], token=tenants.tokens["c"])
    assert client.next_id() > 0
    assert len(client.batch(3)) == 3
    assert client.next_uuid().version == 7
    assert len(client.batch_uuids(3)) == 3
    assert [client.next_value("orders"), *client.batch_values("orders", 2)] == [1, 2, 3]


def test_a_failed_over_attempt_carries_the_token_too(
    start_server: StartServer, tmp_path: Path, tenants: Tenants, connect: Connect
) -> None:
    write_refusing_state(tmp_path, 41)
    refusing = start_server(41, tmp_path, *tenants.flags)
    good = start_server(42, None, *tenants.flags)
    client = connect([refusing.grpc_addr, good.grpc_addr], token=tenants.tokens["c"])
    assert client.batch(2) and client.next_id() > 0
    # The first server let the token in and refused (UNAVAILABLE): no credentials refused anywhere.
    assert refusing.requests("BatchIds") == 1
    assert unauthenticated(refusing) == unauthenticated(good) == 0


def test_the_token_goes_over_tls_too(
    start_server: StartServer, tmp_path: Path, tenants: Tenants, connect: Connect
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    server = start_server(52, None, "--tls-cert", str(cert), "--tls-key", str(key), *tenants.flags)
    credentials = grpc.ssl_channel_credentials(cert.read_bytes())
    endpoints = [f"https://{server.grpc_addr}"]
    client = connect(endpoints, token=tenants.tokens["a"], credentials=credentials)
    assert len(client.batch(1) + client.batch(1)) == 2  # the second after a quota wait
    anonymous = connect(endpoints, credentials=credentials)
    assert refused(anonymous.next_id) == grpc.StatusCode.UNAUTHENTICATED


def test_no_token_or_an_unknown_one_is_unauthenticated_after_one_attempt(
    start_server: StartServer, tenants: Tenants, connect: Connect
) -> None:
    first, second = start_server(43, None, *tenants.flags), start_server(44, None, *tenants.flags)
    endpoints = [first.grpc_addr, second.grpc_addr]
    for client in (connect(endpoints), connect(endpoints, token=UNKNOWN_TOKEN)):
        assert refused(client.next_id) == grpc.StatusCode.UNAUTHENTICATED
        assert refused(lambda: client.batch(1)) == grpc.StatusCode.UNAUTHENTICATED  # noqa: B023
    assert unauthenticated(first) == 4, "each call made more than its one attempt"
    assert unauthenticated(second) == 0, "a refusal of credentials failed over"
    # The same servers serve a known token.
    assert connect(endpoints, token=tenants.tokens["a"]).next_id() > 0


def test_a_call_the_tenant_may_not_make_is_permission_denied_after_one_attempt(
    start_server: StartServer, tenants: Tenants, connect: Connect
) -> None:
    first, second = start_server(45, None, *tenants.flags), start_server(46, None, *tenants.flags)
    client = connect([first.grpc_addr, second.grpc_addr], token=tenants.tokens["b"])
    assert refused(client.next_id) == grpc.StatusCode.PERMISSION_DENIED
    assert first.requests("NextId") == 1 and second.requests("NextId") == 0
    assert client.next_uuid().version == 7  # what b may call


def test_a_quota_refusal_is_waited_out(start_server: StartServer, tenants: Tenants, connect: Connect) -> None:
    server = start_server(47, None, *tenants.flags)
    client = connect([server.grpc_addr], token=tenants.tokens["a"])
    start = time.monotonic()
    first, second = client.batch(1), client.batch(1)
    took = time.monotonic() - start
    assert first[0] < second[0]
    # The bucket holds one ID and refills 5 a second: the second waited about 200 ms.
    assert took >= 0.1, f"two batches of a tenant of 5 a second took {took * 1000:.0f} ms"
    assert server.requests("BatchIds") == 3


def test_a_quota_wait_the_call_cannot_use_ends_it_at_once(
    start_server: StartServer, tenants: Tenants, connect: Connect
) -> None:
    server = start_server(48, None, *tenants.flags)
    client = connect([server.grpc_addr], token=tenants.tokens["slow"])  # one ID a second
    client.batch(1)
    # A deadline further away than the wait: waited out.
    assert client.batch(1, timeout=3.0)
    # A deadline nearer than the wait (about 1 s): the refusal, as it is, at once.
    start = time.monotonic()
    assert refused(lambda: client.batch(1, timeout=0.6)) == grpc.StatusCode.RESOURCE_EXHAUSTED
    took = time.monotonic() - start
    assert took < 0.5, f"the call took {took * 1000:.0f} ms to give up a wait it could not use"
    # No attempt left: the same.
    single = connect([server.grpc_addr], token=tenants.tokens["slow"], attempts=1)
    start = time.monotonic()
    with pytest.raises(grpc.RpcError) as error:
        single.batch(1)
    assert time.monotonic() - start < 0.5
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # The caller can read how long to wait.
    delay = quota_delay(error.value)
    assert delay is not None and 0 < delay <= 1.0, delay


def test_a_quota_wait_stays_on_the_same_endpoint(start_server: StartServer, tenants: Tenants, connect: Connect) -> None:
    first, second = start_server(49, None, *tenants.flags), start_server(50, None, *tenants.flags)
    client = connect([first.grpc_addr, second.grpc_addr], token=tenants.tokens["a"])
    ids = client.batch(1) + client.batch(1) + client.batch(1)
    assert len(set(ids)) == 3
    # Each call after the first is refused once and waits (unless a pause refilled the bucket).
    assert 3 <= first.requests("BatchIds") <= 5, "a wait was not followed by one attempt on the first server"
    assert second.requests("BatchIds") == 0, "a quota wait moved to the second server"


def test_close_ends_a_quota_wait(start_server: StartServer, tenants: Tenants) -> None:
    server = start_server(51, None, *tenants.flags)
    token = tenants.tokens["slow"]  # refills one ID a second

    client = Client([server.grpc_addr], token=token)
    client.batch(1)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            client.batch(1)
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.2)
    closed = time.monotonic()
    client.close()
    thread.join(5)
    assert time.monotonic() - closed < 0.3, "close() did not end the quota wait"
    assert len(errors) == 1 and isinstance(errors[0], ClientClosedError), errors

    async def run() -> None:
        async with AsyncClient([server.grpc_addr], token=token) as aclient:
            await asyncio.sleep(1.1)  # the bucket refilled
            await aclient.batch(1)
            # A caller's cancellation ends the wait.
            task = asyncio.ensure_future(aclient.batch(1))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 0.3)
            # So does close().
            task = asyncio.ensure_future(aclient.batch(1))
            await asyncio.sleep(0.2)
            await asyncio.wait_for(aclient.close(), 0.3)
            with pytest.raises(ClientClosedError):
                await asyncio.wait_for(task, 0.3)

    asyncio.run(run())


SECRET = "smt_secret_token"


@pytest.mark.parametrize(
    "token",
    ["", f"{SECRET} with a space", f"{SECRET}\n", f"{SECRET}é", SECRET + "x" * (4097 - len(SECRET))],
    ids=["empty", "space", "newline", "non-ascii", "4097"],
)
def test_an_invalid_token_is_refused_when_the_client_is_made(token: str) -> None:
    for make in (Client, AsyncClient):
        with pytest.raises(ValueError) as error:
            make(["127.0.0.1:1"], token=token)
        assert SECRET not in str(error.value)


def test_the_clients_printed_form_holds_no_token() -> None:
    longest = SECRET + "~" * (4096 - len(SECRET))
    with Client(["127.0.0.1:1"], token=longest) as client:
        assert SECRET not in repr(client) and SECRET not in str(client)

    async def run() -> None:
        async with AsyncClient(["127.0.0.1:1"], token="!" + SECRET) as client:
            assert SECRET not in repr(client) and SECRET not in str(client)

    asyncio.run(run())
