"""The scenarios: each runs one client's driver against real servers and returns what went
against the contract of clients/README.md (an empty list: it kept it). Times are bounded from
below by what the contract says must happen (a deadline is not cut short, a pause is made)
and from above with room for a shared 2-core machine."""

from __future__ import annotations

import itertools
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from drivers import ROOT, Driver, Reply
from proxy import DelayProxy
from servers import Certificates, Server, TenantFiles

# snowmint's default layout: the worker ID is bits 12 to 21.
WORKER_SHIFT, WORKER_MASK = 12, (1 << 10) - 1

# Slack for a busy machine above a time the contract bounds exactly.
SLACK_MS = 400


def worker_of(id_text: str) -> int:
    return (int(id_text) >> WORKER_SHIFT) & WORKER_MASK


@dataclass
class Settings:
    """The knobs of the long scenarios (their defaults are the contract's own figures)."""

    rolling_down_s: float = 30.0
    paced_s: float = 60.0


@dataclass
class Run:
    """One scenario for one client: the driver, what went wrong, and what to clean up."""

    driver: Driver
    settings: Settings
    failures: list[str] = field(default_factory=list)
    _servers: list[Server] = field(default_factory=list)
    _names: Iterator[int] = field(default_factory=lambda: iter(range(1, 1_000_000)))

    def server(
        self, worker_id: int, *extra: str, refusing: bool = False, sequences: dict[str, list[str]] | None = None
    ) -> Server:
        server = Server(worker_id, *extra, refusing=refusing, sequences=sequences)
        self._servers.append(server)
        return server

    def client(self, endpoints: list[str], **options: Any) -> str:
        """A new client of the driver, by name."""
        name = f"c{next(self._names)}"
        reply = self.driver.call("client", name=name, endpoints=endpoints, **options)
        if not reply["ok"]:
            raise AssertionError(f"could not make a client of {endpoints} with {options}: {reply['error']}")
        return name

    def expect(self, condition: bool, message: str) -> bool:
        if not condition:
            self.failures.append(message)
        return condition

    def expect_ok(self, reply: Reply, what: str) -> bool:
        return self.expect(reply["ok"], f"{what}: failed with {reply.get('error')}")

    def expect_error(self, reply: Reply, kind: str, code: str | None, what: str) -> bool:
        error = reply.get("error") or {}
        got = (error.get("kind"), error.get("code")) if not reply["ok"] else ("ok", None)
        want = (kind, code) if code else (kind, got[1])
        return self.expect(got == want, f"{what}: want {kind} {code or ''}, got {got[0]} {got[1] or ''} ({error})")

    def expect_time(self, reply: Reply, low: float, high: float, what: str) -> bool:
        took = reply["elapsed_ms"]
        return self.expect(low <= took <= high, f"{what}: took {took:.0f} ms, want {low:.0f} to {high:.0f} ms")

    def close(self) -> None:
        for server in self._servers:
            server.close()


Scenario = Callable[[Run], None]


def calls(run: Run) -> None:
    """What each call sends: next_id() one NextId, batch(n) one BatchIds (n = 1 too), a bad
    count returned as the server's INVALID_ARGUMENT; a buffered client sends nothing until it
    is first used."""
    server = run.server(1)
    plain = run.client([server.grpc_addr])
    # A first call opens the connection (a cold runtime may take more than an attempt's second
    # for it, and try again); the calls after it are counted.
    run.expect_ok(run.driver.call("batch", client=plain, n=2), "the first call")

    def counts() -> tuple[int, int]:
        return server.requests("NextId"), server.requests("BatchIds")

    before = counts()
    reply = run.driver.call("next_id", client=plain)
    run.expect_ok(reply, "next_id()")
    after = counts()
    run.expect((after[0] - before[0], after[1] - before[1]) == (1, 0), "next_id() is not one NextId")
    reply = run.driver.call("batch", client=plain, n=1)
    if run.expect_ok(reply, "batch(1)"):
        run.expect(len(reply["ids"]) == 1, f"batch(1) gave {len(reply['ids'])} IDs")
    final = counts()
    run.expect((final[0] - after[0], final[1] - after[1]) == (0, 1), "batch(1) is not one BatchIds")
    reply = run.driver.call("batch", client=plain, n=500)
    if run.expect_ok(reply, "batch(500)"):
        ids = [int(i) for i in reply["ids"]]
        run.expect(len(ids) == 500 and ids == sorted(set(ids)), "batch(500) is not 500 increasing IDs")
    reply = run.driver.call("batch", client=plain, n=0)
    run.expect_error(reply, "rejected", "INVALID_ARGUMENT", "batch(0)")

    batches = server.requests("BatchIds")
    buffered = run.client([server.url], buffer={})
    time.sleep(0.3)
    run.expect(server.requests("BatchIds") == batches, "a buffered client fetched IDs before it was used")
    reply = run.driver.call("next_id", client=buffered)
    run.expect_ok(reply, "buffered next_id()")
    run.expect(server.requests("BatchIds") > batches, "a buffered next_id() sent no BatchIds")


def retries(run: Run) -> None:
    """One retry schedule: no pause until every endpoint was tried in the call, then 10 ms
    doubling; every attempt reaches a server; the final error is UNAVAILABLE."""
    refusing = run.server(3, refusing=True)
    client = run.client([refusing.grpc_addr], attempts=5, timeout_ms=1000)
    run.driver.call("batch", client=client, n=3)  # the connection opens
    before = refusing.requests("BatchIds", "Unavailable")
    reply = run.driver.call("batch", client=client, n=3)
    run.expect_error(reply, "unavailable", "UNAVAILABLE", "5 attempts on a refusing server")
    # Pauses after attempts 1 to 4: 10 + 20 + 40 + 80 ms.
    run.expect_time(reply, 150, 150 + SLACK_MS, "5 attempts on a refusing server")
    run.expect(
        refusing.requests("BatchIds", "Unavailable") - before == 5,
        f"5 attempts made {refusing.requests('BatchIds', 'Unavailable') - before} calls",
    )

    second = run.server(4, refusing=True)
    both = run.client([refusing.grpc_addr, second.grpc_addr], attempts=6)
    run.driver.call("next_id", client=both)
    before_a, before_b = refusing.requests("NextId"), second.requests("NextId")
    reply = run.driver.call("next_id", client=both)
    run.expect_error(reply, "unavailable", "UNAVAILABLE", "6 attempts over 2 refusing servers")
    # A, B, 10 ms, A, 20 ms, B, 40 ms, A, 80 ms, B: 150 ms of pauses (300 if they doubled
    # from the first attempt rather than from the first round).
    run.expect_time(reply, 150, 290, "6 attempts over 2 refusing servers")
    counts = (refusing.requests("NextId") - before_a, second.requests("NextId") - before_b)
    run.expect(counts == (3, 3), f"6 attempts over 2 servers reached them {counts} times")

    # The caller's deadline ends the call, whatever attempts are left.
    many = run.client([refusing.grpc_addr], attempts=50)
    reply = run.driver.call("next_id", client=many, deadline_ms=300)
    run.expect_error(reply, "deadline", "DEADLINE_EXCEEDED", "a 300 ms deadline on a refusing server")
    run.expect_time(reply, 295, 300 + SLACK_MS, "a 300 ms deadline on a refusing server")

    # A buffered client: the refill's error, the same error.
    buffered = run.client([refusing.grpc_addr], attempts=3, buffer={})
    reply = run.driver.call("next_id", client=buffered)
    run.expect_error(reply, "unavailable", "UNAVAILABLE", "a buffered next_id() on a refusing server")


def hung(run: Run) -> None:
    """A server that answers nothing (SIGSTOP): each attempt ends at its own timeout and the
    call fails over; the caller's deadline ends the call on time, with its own error; and a
    caller's deadline passing does not move the client off an endpoint."""
    stopped = run.server(5)
    stopped.pause()
    good = run.server(6)
    buffers: tuple[dict[str, Any] | None, ...] = (None, {})
    for buffer in buffers:
        kind = "buffered" if buffer is not None else "unbuffered"
        options: dict[str, Any] = {"timeout_ms": 300, "attempts": 2}
        if buffer is not None:
            options["buffer"] = buffer
        # A new client for each call, so that no refill of an earlier call is under way.
        reply = run.driver.call("next_id", client=run.client([stopped.grpc_addr], **options))
        run.expect_error(reply, "unavailable", "UNAVAILABLE", f"{kind}, a hung server alone")
        # Two attempts of 300 ms and the 10 ms pause between them.
        run.expect_time(reply, 600, 610 + SLACK_MS, f"{kind}, a hung server alone")
        reply = run.driver.call("next_id", client=run.client([stopped.grpc_addr], **options), deadline_ms=450)
        run.expect_error(reply, "deadline", "DEADLINE_EXCEEDED", f"{kind}, a hung server, a 450 ms deadline")
        run.expect_time(reply, 445, 450 + SLACK_MS, f"{kind}, a hung server, a 450 ms deadline")
        reply = run.driver.call("batch", client=run.client([stopped.grpc_addr], **options), n=5, deadline_ms=200)
        run.expect_error(reply, "deadline", "DEADLINE_EXCEEDED", f"{kind} batch, a hung server, a 200 ms deadline")
        run.expect_time(reply, 195, 200 + SLACK_MS, f"{kind} batch, a hung server, a 200 ms deadline")

    pair = run.client([stopped.grpc_addr, good.grpc_addr], timeout_ms=300)
    reply = run.driver.call("next_id", client=pair)
    if run.expect_ok(reply, "a hung server, then a good one"):
        run.expect(worker_of(reply["ids"][0]) == 6, "the ID did not come from the good server")
        run.expect_time(reply, 295, 300 + SLACK_MS, "a hung server, then a good one")


def deadlines_do_not_move(run: Run) -> None:
    """A caller's own deadline passing says nothing about the server: the client stays on it.
    The first endpoint is a good server behind 100 ms of delay, so a 50 ms deadline passes."""
    slow, other = run.server(7), run.server(8)
    proxy = DelayProxy(slow.grpc_addr, 0.05)
    try:
        client = run.client([proxy.addr, other.grpc_addr], timeout_ms=2000)
        reply = run.driver.call("next_id", client=client)
        if run.expect_ok(reply, "through the delay"):
            run.expect(worker_of(reply["ids"][0]) == 7, "the first call did not go to the first endpoint")
        for op in ("batch", "next_id", "batch"):
            reply = run.driver.call(op, client=client, n=3, deadline_ms=50)
            run.expect_error(reply, "deadline", "DEADLINE_EXCEEDED", f"{op}, a 50 ms deadline behind 100 ms of delay")
        reply = run.driver.call("batch", client=client, n=2)
        if run.expect_ok(reply, "after the deadlines"):
            run.expect(worker_of(reply["ids"][0]) == 7, "a caller's deadline moved the client to the next endpoint")
    finally:
        proxy.close()


def transport(run: Run) -> None:
    """A server killed under a call: the broken connection fails over at once, not at the
    attempt's timeout."""
    doomed, good = run.server(9), run.server(10)
    client = run.client([doomed.grpc_addr, good.grpc_addr], timeout_ms=5000)
    reply = run.driver.call("next_id", client=client)
    run.expect_ok(reply, "before the kill")
    doomed.pause()
    pending = run.driver.send("batch", client=client, n=10)
    time.sleep(0.3)
    doomed.kill()
    reply = pending.result(30)
    if run.expect_ok(reply, "a server killed under the call"):
        run.expect(worker_of(reply["ids"][0]) == 10, "the ID did not come from the other server")
        run.expect_time(reply, 295, 300 + 1500, "a server killed under the call")


def close(run: Run) -> None:
    """close() ends every call waiting on it with the closed error, at once; later calls get
    it too."""
    stopped = run.server(11)
    stopped.pause()
    buffers: tuple[dict[str, Any] | None, ...] = ({}, None)
    for buffer in buffers:
        kind = "buffered" if buffer is not None else "unbuffered"
        options: dict[str, Any] = {"timeout_ms": 10_000}
        if buffer is not None:
            options["buffer"] = buffer
        client = run.client([stopped.grpc_addr], **options)
        waiting = [run.driver.send("next_id", client=client) for _ in range(3)]
        waiting.append(run.driver.send("batch", client=client, n=4))
        time.sleep(0.3)
        start = time.monotonic()
        closed = run.driver.call("close", client=client)
        run.expect_ok(closed, f"{kind} close()")
        limit = start + 5
        for n, pending in enumerate(waiting):
            try:
                reply = pending.result(max(0.0, limit - time.monotonic()))
            except TimeoutError:
                run.expect(False, f"{kind}: call {n} still waiting 5 s after close()")
                continue
            run.expect_error(reply, "closed", None, f"{kind}: call {n} waiting at close()")
        after = (time.monotonic() - start) * 1000
        run.expect(after < 1000, f"{kind}: the waiting calls ended {after:.0f} ms after close()")
        reply = run.driver.call("next_id", client=client)
        run.expect_error(reply, "closed", None, f"{kind}: next_id() after close()")
        run.expect_time(reply, 0, 50, f"{kind}: next_id() after close()")
        reply = run.driver.call("batch", client=client, n=2)
        run.expect_error(reply, "closed", None, f"{kind}: batch() after close()")
        run.expect_ok(run.driver.call("close", client=client), f"{kind}: close() again")


def sequence_prefetch(run: Run) -> None:
    """With sequence_prefetch 10, next_value() of an unordered sequence takes one NextValue
    (which says the sequence is unordered), then one BatchValues of 10 per 10 values: two
    clients taking turns see their values in runs of 10, all distinct. An ordered sequence is
    never buffered: one NextValue a call, and two clients taking turns get increasing values.
    The last values before a sequence's maximum are all handed out, then OUT_OF_RANGE. 200
    concurrent calls on one client get 200 distinct values from few calls. A prefetch above
    65,536 (the server's default --max-batch) is refused when the client is made."""
    server = run.server(13, sequences={"orders": [], "invoices": ["--ordered"], "short": ["--max", "25"]})

    def value(client: str, sequence: str) -> int:
        reply = run.driver.call("next_value", client=client, sequence=sequence)
        if not reply["ok"]:
            raise AssertionError(f"next_value({sequence!r}) failed: {reply['error']}")
        return int(reply["value"])

    a, b = (run.client([server.grpc_addr], sequence_prefetch=10) for _ in range(2))
    taken: dict[str, list[int]] = {a: [], b: []}
    for _ in range(30):
        for client in (a, b):
            taken[client].append(value(client, "orders"))
    for client, values in taken.items():
        run.expect(values == sorted(set(values)), f"{client}: values not increasing: {values}")
        jumps = sum(1 for x, y in itertools.pairwise(values[1:]) if y != x + 1)
        run.expect(jumps <= 3, f"{client}: values not in runs of 10 after the first: {values}")
    every = [v for values in taken.values() for v in values]
    run.expect(len(set(every)) == len(every), "a value handed out twice")
    counts = (server.requests("NextValue"), server.requests("BatchValues"))
    run.expect(counts == (2, 6), f"60 values took {counts[0]} NextValue and {counts[1]} BatchValues, want 2 and 6")

    ordered: list[int] = []
    for _ in range(5):
        for client in (a, b):
            ordered.append(value(client, "invoices"))
    run.expect(ordered == sorted(set(ordered)), f"an ordered sequence taken in turns: {ordered}")
    run.expect(server.requests("NextValue") == 2 + 10, "an ordered sequence was buffered")

    short: list[int] = []
    for _ in range(26):
        reply = run.driver.call("next_value", client=a, sequence="short")
        if not reply["ok"]:
            run.expect_error(reply, "rejected", "OUT_OF_RANGE", "next_value() past the maximum")
            break
        short.append(int(reply["value"]))
    run.expect(short == list(range(1, 26)), f"a sequence of 25 gave {short}")

    many = run.client([server.grpc_addr], sequence_prefetch=100)
    before = server.requests("NextValue") + server.requests("BatchValues")
    pending = [run.driver.send("next_value", client=many, sequence="orders") for _ in range(200)]
    replies = [p.result(60) for p in pending]
    got = [int(r["value"]) for r in replies if r["ok"]]
    run.expect(len(got) == 200 and len(set(got + every)) == 260, f"200 concurrent calls: {len(set(got))} distinct")
    made = server.requests("NextValue") + server.requests("BatchValues") - before
    run.expect(made <= 4, f"200 concurrent calls with prefetch 100 made {made} calls")

    reply = run.driver.call("client", name="too-big", endpoints=[server.grpc_addr], sequence_prefetch=65537)
    run.expect_error(reply, "invalid", None, "sequence_prefetch 65537")


def max_batch(run: Run) -> None:
    """A server with --max-batch 100: bursts of unbuffered next_id() and a buffered client
    asking for 4096 at a time still get their IDs."""
    server = run.server(12, "--max-batch", "100")
    buffers: tuple[dict[str, Any] | None, ...] = (None, {})
    for buffer in buffers:
        kind = "buffered" if buffer is not None else "unbuffered"
        options: dict[str, Any] = {} if buffer is None else {"buffer": buffer}
        client = run.client([server.grpc_addr], **options)
        ids: list[int] = []
        for _ in range(3):
            reply = run.driver.call("burst", client=client, n=300, timeout=60)
            failed = [r["error"] for r in reply["results"] if not r["ok"]]
            run.expect(not failed, f"{kind}: {len(failed)} of 300 calls failed; first: {failed[:1]}")
            ids.extend(int(r["id"]) for r in reply["results"] if r["ok"])
        run.expect(len(ids) == len(set(ids)), f"{kind}: an ID handed out twice")
    invalid = server.requests("BatchIds", "InvalidArgument")
    run.expect(invalid <= 16, f"the clients kept asking for more than 100 at once ({invalid} refusals)")


def tls(run: Run) -> None:
    """Mutual TLS: a client with the CA and a client certificate gets IDs; one without the
    certificate is refused."""
    certs = Certificates()
    try:
        server = run.server(
            13, "--tls-cert", str(certs.server), "--tls-key", str(certs.server_key), "--tls-client-ca", str(certs.ca)
        )
        url = f"https://127.0.0.1:{server.grpc_addr.rpartition(':')[2]}"
        mutual = run.client([url], tls={"ca": str(certs.ca), "cert": str(certs.client), "key": str(certs.client_key)})
        run.expect_ok(run.driver.call("next_id", client=mutual), "mutual TLS next_id()")
        run.expect_ok(run.driver.call("batch", client=mutual, n=10), "mutual TLS batch(10)")
        anonymous = run.client([url], tls={"ca": str(certs.ca)}, timeout_ms=500)
        reply = run.driver.call("next_id", client=anonymous)
        run.expect_error(reply, "unavailable", "UNAVAILABLE", "TLS without the client certificate")
    finally:
        certs.close()


# Tenant a: 2 IDs a second, 1 at once, so a call right after another waits about 500 ms.
TENANTS_POLICY = """
[tenant.a]
tokens = ["a-1"]
allow = ["ids"]
rate = 2
burst = 1

[tenant.b]
tokens = ["b-1"]
allow = ["uuids"]
"""

# The same, and a tenant known by the suite's client certificate (for a mutual-TLS server).
TENANTS_POLICY_TLS = (
    TENANTS_POLICY
    + """
[tenant.by-certificate]
certificates = ["DNS:conformance-client"]
allow = ["ids"]
"""
)


def tenants(run: Run) -> None:
    """Credentials and quota waits: a token on every call; UNAUTHENTICATED and
    PERMISSION_DENIED as they are, after one call; a quota refusal waited out on the same
    server, or returned at once when the caller's deadline is nearer than the wait; a buffer
    that fits the tenant's burst; a bad token refused unshown; a client certificate as a
    tenant, and a token over it."""
    files = TenantFiles(["a-1", "b-1"])
    certs = Certificates()
    try:
        server = run.server(21, *files.serve_args(TENANTS_POLICY))
        other = run.server(22)
        a = run.client([server.grpc_addr, other.grpc_addr], token=files.token("a-1"))
        run.expect_ok(run.driver.call("batch", client=a, n=1), "tenant a's first batch(1)")
        refused = server.requests("BatchIds", "ResourceExhausted")
        reply = run.driver.call("batch", client=a, n=1)
        run.expect_ok(reply, "tenant a's batch(1) right after, over its rate")
        run.expect_time(reply, 250, 500 + 2 * SLACK_MS, "a batch(1) that waits out the quota")
        run.expect(
            server.requests("BatchIds", "ResourceExhausted") - refused == 1,
            f"a quota wait took {server.requests('BatchIds', 'ResourceExhausted') - refused} refusals, not 1",
        )
        reply = run.driver.call("batch", client=a, n=1, deadline_ms=100)
        run.expect_error(reply, "rejected", "RESOURCE_EXHAUSTED", "a 100 ms deadline before a 500 ms wait")
        run.expect_time(reply, 0, 100 + SLACK_MS, "a refusal returned at once, the wait beyond the deadline")
        reply = run.driver.call("next_id", client=a, deadline_ms=100)
        run.expect_error(reply, "rejected", "RESOURCE_EXHAUSTED", "next_id() with a 100 ms deadline before the wait")
        run.expect_ok(run.driver.call("next_id", client=a), "tenant a's next_id(), over its rate")
        run.expect(other.requests("BatchIds") + other.requests("NextId") == 0, "a quota wait moved to another server")
        buffered = run.client([server.grpc_addr], token=files.token("a-1"), buffer={})
        reply = run.driver.call("next_id", client=buffered, deadline_ms=10_000)
        run.expect_ok(reply, "a buffered next_id() of a tenant with a burst of 1")

        def unauthenticated() -> float:
            series = server.metrics()
            return sum(v for k, v in series.items() if k.startswith("snowmint_unauthenticated_calls_total{"))

        before = unauthenticated()
        for what, options in [("no token", {}), ("an unknown token", {"token": "smt_" + "x" * 43})]:
            client = run.client([server.grpc_addr, other.grpc_addr], **options)
            reply = run.driver.call("next_id", client=client)
            run.expect_error(reply, "rejected", "UNAUTHENTICATED", f"next_id() with {what}")
        run.expect(unauthenticated() - before == 2, f"2 unauthenticated calls made {unauthenticated() - before}")
        permission = 'snowmint_tenant_refusals_total{reason="permission",tenant="b"}'
        before = server.metrics().get(permission, 0.0)
        b = run.client([server.grpc_addr, other.grpc_addr], token=files.token("b-1"))
        reply = run.driver.call("batch", client=b, n=5)
        run.expect_error(reply, "rejected", "PERMISSION_DENIED", "tenant b's batch(5), which it may not call")
        run.expect(server.metrics().get(permission, 0.0) - before == 1, "a PERMISSION_DENIED was not one call")
        run.expect(other.requests("BatchIds") == 0, "a refusal of the policy moved to another server")

        for bad in ["two words", "", "x" * 4097, "tab\there"]:
            reply = run.driver.call("client", name=f"bad{len(bad)}", endpoints=[server.grpc_addr], token=bad)
            if run.expect_error(reply, "invalid", None, f"a token of {len(bad)} characters that cannot be one"):
                message = reply["error"].get("message") or ""
                run.expect(not bad or bad not in message, f"the refusal shows the token: {message!r}")

        mutual = run.server(
            23, "--tls-cert", str(certs.server), "--tls-key", str(certs.server_key), "--tls-client-ca", str(certs.ca),
            *files.serve_args(TENANTS_POLICY_TLS),
        )  # fmt: skip
        url = f"https://127.0.0.1:{mutual.grpc_addr.rpartition(':')[2]}"
        tls = {"ca": str(certs.ca), "cert": str(certs.client), "key": str(certs.client_key)}
        by_certificate = run.client([url], tls=tls)
        run.expect_ok(run.driver.call("batch", client=by_certificate, n=10), "a tenant known by its certificate")
        token_over = run.client([url], tls=tls, token=files.token("b-1"))
        reply = run.driver.call("batch", client=token_over, n=10)
        run.expect_error(reply, "rejected", "PERMISSION_DENIED", "a token over a certificate: the token's tenant")
    finally:
        certs.close()
        files.close()


def vectors(run: Run) -> None:
    """The shared test vectors, decoded and written by the client itself."""
    data = json.loads((ROOT / "clients" / "testdata" / "vectors.json").read_text())
    layouts = {name: {**spec, "epoch_ms": int(spec["epoch_ms"])} for name, spec in data["layouts"].items()}
    for vector in data["vectors"]:
        reply = run.driver.call("decode", value=vector["id"], layout=layouts[vector["layout"]])
        want = {k: vector[k] for k in ("unix_ms", "tick", "worker_id", "sequence", "time")}
        got = {k: reply.get(k) for k in want}
        run.expect(reply["ok"] and got == want, f"decode {vector['id']} ({vector['layout']}): {reply}, want {want}")
    for vector in data["invalid"]:
        reply = run.driver.call("decode", value=vector["id"], layout=layouts[vector["layout"]])
        run.expect_error(reply, "invalid", None, f"decode {vector['id']} ({vector['layout']})")

    opaque = json.loads((ROOT / "clients" / "testdata" / "opaque-strings.json").read_text())
    for entry in opaque["valid"]:
        reply = run.driver.call("opaque_format", key_version=entry["key_version"], value=entry["value"])
        run.expect(reply.get("text") == entry["text"], f"writing {entry}: {reply}")
        reply = run.driver.call("opaque_parse", text=entry["text"])
        read = (reply.get("key_version"), reply.get("value"))
        run.expect(read == (entry["key_version"], entry["value"]), f"reading {entry['text']}: {reply}")
    for entry in opaque["aliases"]:
        reply = run.driver.call("opaque_parse", text=entry["text"])
        read = (reply.get("key_version"), reply.get("value"))
        run.expect(read == (entry["key_version"], entry["value"]), f"reading {entry['text']!r}: {reply}")
    for entry in opaque["invalid"]:
        reply = run.driver.call("opaque_parse", text=entry["text"])
        error = reply.get("error") or {}
        run.expect(
            not reply["ok"] and error.get("opaque_kind") == entry["kind"],
            f"reading {entry['text']!r}: {reply}, want the error of kind {entry['kind']}",
        )
    for entry in opaque["unencodable"]:
        reply = run.driver.call("opaque_format", key_version=entry["key_version"], value=entry["value"])
        run.expect(not reply["ok"], f"writing {entry}: {reply}, want a refusal")


def paced(run: Run) -> None:
    """A buffered client used at 10 IDs/s, behind 25 ms of delay each way: after the first
    second no call waits a round trip (at an expiry or otherwise), and the server mints a
    small multiple of the IDs used."""
    server = run.server(14)
    proxy = DelayProxy(server.grpc_addr, 0.025)
    try:
        client = run.client([proxy.addr], buffer={})
        duration_ms = run.settings.paced_s * 1000
        reply = run.driver.call(
            "loop", client=client, every_ms=100, duration_ms=duration_ms, timeout=duration_ms / 1000 + 60
        )
        if not run.expect_ok(reply, "the loop"):
            return
        calls = reply["calls"]
        start = calls[0][0]
        failed = [c for c in calls if c[3] is not None]
        run.expect(not failed, f"{len(failed)} of {len(calls)} calls failed; first: {failed[:1]}")
        slow = [c for c in calls if c[0] - start >= 1000 and c[1] >= 40]
        run.expect(
            not slow,
            f"{len(slow)} of {len(calls)} calls after the first second waited a round trip: "
            + ", ".join(f"{c[1]:.0f} ms at {(c[0] - start) / 1000:.1f} s" for c in slow[:5]),
        )
        used = len(calls) - len(failed)
        minted = server.issued()
        run.expect(
            minted <= 3 * used + 50,
            f"{minted} IDs minted for {used} used over {run.settings.paced_s:g} s ({minted / used:.1f} per ID used)",
        )
    finally:
        proxy.close()


@dataclass
class Rolling:
    """The servers of the rolling restart, shared by every client at once, and when A came
    back (Unix ms)."""

    a: Server
    b: Server
    back_ms: float = 0.0
    started: threading.Event = field(default_factory=threading.Event)


@contextmanager
def rolling_servers() -> Iterator[Rolling]:
    a, b = Server(21), Server(22)
    try:
        yield Rolling(a, b)
    finally:
        a.close()
        b.close()


def rolling_restart(run: Run, rolling: Rolling, loop_ms: float) -> Callable[[Reply], None]:
    """Starts this client's loop over A and B; the function that checks its calls once the
    restart is over."""
    client = run.client([rolling.a.grpc_addr, rolling.b.grpc_addr], timeout_ms=500)
    run.expect_ok(run.driver.call("batch", client=client, n=1), "before the restart")
    pending = run.driver.send("loop", client=client, every_ms=50, duration_ms=loop_ms, deadline_ms=2000)

    def check(_: Reply) -> None:
        reply = pending.result(loop_ms / 1000 + 60)
        if not run.expect_ok(reply, "the loop"):
            return
        calls = reply["calls"]
        back = rolling.back_ms
        before = [c for c in calls if c[0] + c[1] < back]
        failed = [c for c in before if c[3] is not None]
        run.expect(not failed, f"{len(failed)} calls failed while only A was down; first: {failed[:1]}")
        on_a = [c for c in calls if c[0] >= back and c[2] is not None and worker_of(c[2]) == 21]
        if run.expect(bool(on_a), "no call succeeded on A after it came back"):
            first = on_a[0][0] + on_a[0][1] - back
            run.expect(first <= 1000, f"the first call served by A ended {first:.0f} ms after A came back")
        late = [c for c in calls if c[0] >= back + 1000 and c[3] is not None]
        run.expect(not late, f"{len(late)} calls failed more than 1 s after A came back; first: {late[:1]}")
        ids = [c[2] for c in calls if c[2] is not None]
        run.expect(len(ids) == len(set(ids)), "an ID handed out twice")

    return check


def run_rolling(rolling: Rolling, down_s: float) -> None:
    """A stopped (SIGTERM) for down_s seconds and started again on its address; B killed as
    soon as A is back."""
    time.sleep(1.0)
    rolling.a.stop()
    time.sleep(down_s)
    rolling.a.start()
    rolling.back_ms = time.time() * 1000
    rolling.b.signal(signal.SIGKILL)


SCENARIOS: dict[str, Scenario] = {
    "calls": calls,
    "retries": retries,
    "hung": hung,
    "deadlines": deadlines_do_not_move,
    "transport": transport,
    "close": close,
    "max-batch": max_batch,
    "sequence-prefetch": sequence_prefetch,
    "tls": tls,
    "tenants": tenants,
    "vectors": vectors,
    "paced": paced,
}
