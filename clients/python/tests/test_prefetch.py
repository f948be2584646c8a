"""The sequence prefetch buffer (``sequence_prefetch``) of Client and AsyncClient, against a
real server: values of an unordered sequence in runs of n from about one call per n, an
ordered sequence never buffered, the last values before a maximum still handed out, many
callers sharing refills, and the option's range."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import threading
from pathlib import Path

import grpc
import pytest
from conftest import Server, StartServer, assert_unique

from snowmint_client import AsyncClient, Client, ClientClosedError

SEQUENCES = {"orders": [], "invoices": ["--ordered"], "short": ["--max", "25"]}


def sequences_server(start_server: StartServer, snowmint_bin: str, state_dir: Path, worker_id: int) -> Server:
    for name, flags in SEQUENCES.items():
        command = [snowmint_bin, "sequence", "create", name, "--state-dir", str(state_dir), *flags]
        subprocess.run(command, check=True, capture_output=True)
    return start_server(worker_id, state_dir)


def check_runs(from_a: list[int], from_b: list[int]) -> None:
    """Each client's values increase and, after the first, come in runs of 10."""
    for values in (from_a, from_b):
        assert all(x < y for x, y in itertools.pairwise(values)), values
        jumps = sum(1 for x, y in itertools.pairwise(values[1:]) if y != x + 1)
        assert jumps <= 5, values
    assert_unique(from_a + from_b)


def test_prefetch_buffers_unordered_sequences_only(
    start_server: StartServer, snowmint_bin: str, tmp_path: Path
) -> None:
    server = sequences_server(start_server, snowmint_bin, tmp_path, 20)
    with (
        Client([server.grpc_addr], sequence_prefetch=10) as a,
        Client([server.grpc_addr], sequence_prefetch=10) as b,
    ):
        from_a: list[int] = []
        from_b: list[int] = []
        for _ in range(50):
            from_a.append(a.next_value("orders"))
            from_b.append(b.next_value("orders"))
        check_runs(from_a, from_b)
        assert (server.requests("NextValue"), server.requests("BatchValues")) == (2, 10)
        for _ in range(10):
            x, y, z = a.next_value("invoices"), b.next_value("invoices"), a.next_value("invoices")
            assert x < y < z
        assert server.requests("NextValue") == 2 + 30
        short: list[int] = []
        with pytest.raises(grpc.RpcError) as error:
            while len(short) <= 25:
                short.append(a.next_value("short"))
        assert error.value.code() == grpc.StatusCode.OUT_OF_RANGE
        assert short == list(range(1, 26))
        with pytest.raises(grpc.RpcError) as error:
            a.next_value("missing")
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
        a.close()
        with pytest.raises(ClientClosedError):
            a.next_value("orders")


def test_prefetch_shares_refills_between_threads(start_server: StartServer, snowmint_bin: str, tmp_path: Path) -> None:
    server = sequences_server(start_server, snowmint_bin, tmp_path, 21)
    values: list[int] = []
    with Client([server.grpc_addr], sequence_prefetch=100) as client:

        def take() -> None:
            for _ in range(25):
                values.append(client.next_value("orders", timeout=30))

        threads = [threading.Thread(target=take) for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert len(values) == 500
    assert_unique(values)
    assert server.requests("NextValue") + server.requests("BatchValues") <= 7


def test_asyncio_prefetch(start_server: StartServer, snowmint_bin: str, tmp_path: Path) -> None:
    server = sequences_server(start_server, snowmint_bin, tmp_path, 22)

    async def main() -> None:
        async with (
            AsyncClient([server.grpc_addr], sequence_prefetch=10) as a,
            AsyncClient([server.grpc_addr], sequence_prefetch=10) as b,
        ):
            from_a: list[int] = []
            from_b: list[int] = []
            for _ in range(50):
                from_a.append(await a.next_value("orders"))
                from_b.append(await b.next_value("orders"))
            check_runs(from_a, from_b)
            assert (server.requests("NextValue"), server.requests("BatchValues")) == (2, 10)
            for _ in range(10):
                x, y, z = await a.next_value("invoices"), await b.next_value("invoices"), await a.next_value("invoices")
                assert x < y < z
            assert server.requests("NextValue") == 2 + 30
            short: list[int] = []
            with pytest.raises(grpc.RpcError) as error:
                while len(short) <= 25:
                    short.append(await a.next_value("short"))
            assert error.value.code() == grpc.StatusCode.OUT_OF_RANGE
            assert short == list(range(1, 26))
            before = server.requests("BatchValues")
            many = await asyncio.gather(*(b.next_value("orders", timeout=30) for _ in range(500)))
            assert_unique(from_a + from_b + list(many))
            assert server.requests("BatchValues") - before <= 51

    asyncio.run(main())


@pytest.mark.parametrize("make", [Client, AsyncClient])
def test_the_option_is_checked(make: type) -> None:
    for bad in (-1, 65537):
        with pytest.raises(ValueError, match="65536"):
            make(["127.0.0.1:1"], sequence_prefetch=bad)
