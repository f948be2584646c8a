"""The Python client's driver for the conformance suite (clients/conformance): reads one JSON
request a line on stdin, answers each on stdout once its call has ended, many at once. The
ops and the error kinds are described in clients/conformance/drivers.py.

    .venv/bin/python conformance_driver.py [--asyncio]

With --asyncio it drives AsyncClient on one event loop; without, Client, one thread per
request."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from snowmint_client import (
    AsyncClient,
    BufferConfig,
    Client,
    ClientClosedError,
    DeadlineExceededError,
    Layout,
    NotThisLayoutError,
    OpaqueId,
    OpaqueIdError,
    UnavailableError,
    decode,
)

Json = dict[str, Any]
_out = threading.Lock()


def reply(message: Json) -> None:
    line = json.dumps(message)
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def error_of(error: BaseException) -> Json:
    """The suite's form of an error: its kind, gRPC code and message."""
    if isinstance(error, UnavailableError):
        return {"kind": "unavailable", "code": error.code.name, "message": str(error)}
    if isinstance(error, DeadlineExceededError):
        return {"kind": "deadline", "code": error.code().name, "message": str(error)}
    if isinstance(error, ClientClosedError):
        return {"kind": "closed", "code": None, "message": str(error)}
    if isinstance(error, grpc.RpcError):
        call: Any = error
        return {"kind": "rejected", "code": call.code().name, "message": str(call.details())}
    if isinstance(error, OpaqueIdError):
        return {"kind": "opaque", "opaque_kind": error.kind, "code": None, "message": str(error)}
    if isinstance(error, (NotThisLayoutError, ValueError)):
        return {"kind": "invalid", "code": None, "message": str(error)}
    return {"kind": "other", "code": None, "message": f"{type(error).__name__}: {error}"}


def options_of(request: Json) -> Json:
    """Client keyword options from a ``client`` request."""
    options: Json = {}
    if "timeout_ms" in request:
        options["timeout"] = request["timeout_ms"] / 1000
    if "attempts" in request:
        options["attempts"] = request["attempts"]
    if "sequence_prefetch" in request:
        options["sequence_prefetch"] = request["sequence_prefetch"]
    if "token" in request:
        options["token"] = request["token"]
    buffer = request.get("buffer")
    if buffer is not None:
        fields = {k: buffer[k] for k in ("batch", "low_water", "max_refills") if k in buffer}
        if "max_age_ms" in buffer:
            fields["max_age"] = buffer["max_age_ms"] / 1000
        options["buffer"] = BufferConfig(**fields)
    tls = request.get("tls")
    if tls is not None:
        pem = {key: Path(tls[key]).read_bytes() for key in ("ca", "cert", "key") if key in tls}
        options["credentials"] = grpc.ssl_channel_credentials(pem.get("ca"), pem.get("key"), pem.get("cert"))
    return options


def offline(request: Json) -> Json:
    """The ops that need no client: decode and the opaque string form."""
    op = request["op"]
    if op == "decode":
        spec = request["layout"]
        layout = Layout(
            "test",
            spec["epoch_ms"],
            spec["tick_ms"],
            spec["time_bits"],
            spec["worker_bits"],
            spec["sequence_bits"],
            spec["order"],
        )
        d = decode(int(request["value"]), layout)
        return {
            "unix_ms": str(d.unix_ms),
            "tick": str(d.tick),
            "worker_id": d.worker_id,
            "sequence": d.sequence,
            "time": d.rfc3339,
        }
    if op == "opaque_format":
        return {"text": str(OpaqueId.of(request["key_version"], int(request["value"])))}
    if op == "opaque_parse":
        opaque = OpaqueId.parse(request["text"])
        return {"key_version": opaque.key_version, "value": str(opaque.value)}
    raise ValueError(f"unknown op {op!r}")


def deadline_of(request: Json) -> float | None:
    return request["deadline_ms"] / 1000 if "deadline_ms" in request else None


class Blocking:
    """Requests on Client, one thread each."""

    def __init__(self) -> None:
        self.clients: dict[str, Client] = {}
        self.pool = ThreadPoolExecutor(512)

    def handle(self, request: Json) -> None:
        self.pool.submit(self.answer, request)

    def answer(self, request: Json) -> None:
        start = time.monotonic()
        try:
            result = self.run(request)
            message = {"ok": True, **result}
        except Exception as error:
            message = {"ok": False, "error": error_of(error)}
        reply({"id": request["id"], "elapsed_ms": (time.monotonic() - start) * 1000, **message})

    def run(self, request: Json) -> Json:
        op = request["op"]
        if op == "client":
            self.clients[request["name"]] = Client(request["endpoints"], **options_of(request))
            return {}
        if op not in ("next_id", "batch", "burst", "loop", "close", "next_value"):
            return offline(request)
        client = self.clients[request["client"]]
        timeout = deadline_of(request)
        if op == "next_id":
            return {"ids": [str(client.next_id(timeout=timeout))]}
        if op == "next_value":
            return {"value": str(client.next_value(request["sequence"], timeout=timeout))}
        if op == "batch":
            return {"ids": [str(i) for i in client.batch(request["n"], timeout=timeout)]}
        if op == "close":
            client.close()
            return {}
        if op == "burst":
            with ThreadPoolExecutor(request["n"]) as pool:
                return {"results": list(pool.map(lambda _: self.one(client), range(request["n"])))}
        return {"calls": self.loop(client, request, timeout)}

    @staticmethod
    def one(client: Client) -> Json:
        try:
            return {"ok": True, "id": str(client.next_id())}
        except Exception as error:
            return {"ok": False, "error": error_of(error)}

    @staticmethod
    def loop(client: Client, request: Json, timeout: float | None) -> list[list[Any]]:
        calls: list[list[Any]] = []
        start = time.monotonic()
        n = 0
        while time.monotonic() - start < request["duration_ms"] / 1000:
            due = start + n * request["every_ms"] / 1000
            time.sleep(max(0.0, due - time.monotonic()))
            at, begun = time.time() * 1000, time.monotonic()
            try:
                calls.append([at, 0.0, str(client.next_id(timeout=timeout)), None])
            except Exception as error:
                calls.append([at, 0.0, None, error_of(error)["kind"]])
            calls[-1][1] = (time.monotonic() - begun) * 1000
            n += 1
        return calls


class Asynchronous:
    """Requests on AsyncClient, one task each, on one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.clients: dict[str, AsyncClient] = {}

    def handle(self, request: Json) -> None:
        asyncio.run_coroutine_threadsafe(self.answer(request), self.loop)

    async def answer(self, request: Json) -> None:
        start = time.monotonic()
        try:
            result = await self.run(request)
            message = {"ok": True, **result}
        except Exception as error:
            message = {"ok": False, "error": error_of(error)}
        reply({"id": request["id"], "elapsed_ms": (time.monotonic() - start) * 1000, **message})

    async def run(self, request: Json) -> Json:
        op = request["op"]
        if op == "client":
            self.clients[request["name"]] = AsyncClient(request["endpoints"], **options_of(request))
            return {}
        if op not in ("next_id", "batch", "burst", "loop", "close", "next_value"):
            return offline(request)
        client = self.clients[request["client"]]
        timeout = deadline_of(request)
        if op == "next_id":
            return {"ids": [str(await client.next_id(timeout=timeout))]}
        if op == "next_value":
            return {"value": str(await client.next_value(request["sequence"], timeout=timeout))}
        if op == "batch":
            return {"ids": [str(i) for i in await client.batch(request["n"], timeout=timeout)]}
        if op == "close":
            await client.close()
            return {}
        if op == "burst":
            return {"results": await asyncio.gather(*(self.one(client.next_id) for _ in range(request["n"])))}
        return {"calls": await self.loop_calls(client, request, timeout)}

    @staticmethod
    async def one(call: Callable[[], Awaitable[int]]) -> Json:
        try:
            return {"ok": True, "id": str(await call())}
        except Exception as error:
            return {"ok": False, "error": error_of(error)}

    @staticmethod
    async def loop_calls(client: AsyncClient, request: Json, timeout: float | None) -> list[list[Any]]:
        calls: list[list[Any]] = []
        start = time.monotonic()
        n = 0
        while time.monotonic() - start < request["duration_ms"] / 1000:
            due = start + n * request["every_ms"] / 1000
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            at, begun = time.time() * 1000, time.monotonic()
            try:
                calls.append([at, 0.0, str(await client.next_id(timeout=timeout)), None])
            except Exception as error:
                calls.append([at, 0.0, None, error_of(error)["kind"]])
            calls[-1][1] = (time.monotonic() - begun) * 1000
            n += 1
        return calls


def main() -> None:
    if "--asyncio" in sys.argv[1:]:
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        handler: Blocking | Asynchronous = Asynchronous(loop)
    else:
        handler = Blocking()
    for line in sys.stdin:
        if line.strip():
            handler.handle(json.loads(line))


if __name__ == "__main__":
    main()
