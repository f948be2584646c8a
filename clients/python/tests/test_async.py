"""The asyncio client against real servers. Each test runs its own event loop."""

from __future__ import annotations

import asyncio
import random
import subprocess
import time
import uuid
from pathlib import Path

import grpc
import pytest
from conftest import StartServer, assert_increasing, assert_unique, assert_uuids_increase, write_refusing_state

from snowmint_client import AsyncClient, BufferConfig, ClientClosedError, UnavailableError, decode, decode_uuid


async def mixed_calls(client: AsyncClient, caller: int, rounds: int) -> list[int]:
    rng = random.Random(caller)
    ids: list[int] = []
    for round in range(rounds):
        if round % 2 == 0:
            ids.append(await client.next_id(timeout=5))
        else:
            n = rng.randint(1, 300)
            batch = await client.batch(n, timeout=5)
            assert len(batch) == n
            assert_increasing(batch)
            ids.extend(batch)
    return ids


def test_many_concurrent_tasks_get_unique_ids(start_server: StartServer) -> None:
    server = start_server(1)

    async def run() -> list[int]:
        async with (
            AsyncClient([server.grpc_addr]) as plain,
            AsyncClient([server.grpc_addr], buffer=BufferConfig()) as buf,
        ):
            results = await asyncio.gather(*(mixed_calls([plain, buf][n % 2], n, 100) for n in range(16)))
        return [id for result in results for id in result]

    ids = asyncio.run(run())
    assert len(ids) > 16 * 50
    assert_unique(ids)


def test_failover_when_a_server_is_killed(start_server: StartServer) -> None:
    first, second = start_server(1), start_server(2)

    async def run() -> tuple[list[int], int]:
        ids: list[int] = []
        after_kill = 0
        killed = stop = False

        async def caller(client: AsyncClient, n: int) -> None:
            nonlocal after_kill
            round = 0
            while not stop:
                got = [await client.next_id()] if (n + round) % 2 == 0 else await client.batch(50)
                ids.extend(got)
                after_kill += killed
                round += 1

        async with AsyncClient([first.grpc_addr, second.grpc_addr], timeout=0.5) as client:
            tasks = [asyncio.create_task(caller(client, n)) for n in range(8)]
            await asyncio.sleep(0.3)
            await asyncio.to_thread(first.kill)
            killed = True
            await asyncio.sleep(0.7)
            stop = True
            await asyncio.gather(*tasks)  # a failed call fails the test here
            assert decode(await client.next_id()).worker_id == 2
        return ids, after_kill

    ids, after_kill = asyncio.run(run())
    assert after_kill >= 10, f"only {after_kill} calls succeeded after the kill"
    assert_unique(ids)


def test_a_refusing_server_is_skipped_and_alone_gives_a_retriable_error(
    start_server: StartServer, tmp_path: Path
) -> None:
    write_refusing_state(tmp_path, 3)
    refusing = start_server(3, tmp_path)
    good = start_server(4)

    async def run() -> None:
        async with AsyncClient([refusing.grpc_addr, good.grpc_addr]) as client:
            assert decode(await client.next_id()).worker_id == 4
            assert len(await client.batch(10)) == 10
        for buffer in (None, BufferConfig()):
            async with AsyncClient([refusing.grpc_addr], timeout=0.3, buffer=buffer) as alone:
                start = time.monotonic()
                with pytest.raises(UnavailableError):
                    await alone.next_id()
                assert time.monotonic() - start < 3
                with pytest.raises(UnavailableError):
                    await alone.batch(5)

    asyncio.run(run())


def test_the_buffer_drops_batches_past_their_age(start_server: StartServer) -> None:
    server = start_server(5)
    max_age = 0.2

    async def run() -> list[int]:
        ids: list[int] = []
        config = BufferConfig(batch=64, low_water=8, max_refills=1, max_age=max_age)
        async with AsyncClient([server.grpc_addr], buffer=config) as client:
            for _ in range(3):
                ids.append(await client.next_id())
                await asyncio.sleep(2 * max_age)
                before_ms = time.time() * 1000
                fresh = await client.next_id()
                ids.append(fresh)
                assert decode(fresh).unix_ms >= before_ms - 1, "a stale batch was used"
            ids.extend([await client.next_id() for _ in range(1000)])
        return ids

    assert_unique(asyncio.run(run()))


def test_other_errors_return_as_they_are_without_failover(start_server: StartServer) -> None:
    first, second = start_server(6), start_server(7)

    async def run() -> None:
        async with AsyncClient([first.grpc_addr, second.grpc_addr]) as client:
            with pytest.raises(grpc.RpcError) as error:
                await client.batch(0)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    asyncio.run(run())
    assert first.requests("BatchIds") == 1
    assert second.requests("BatchIds") == 0, "the error was failed over"


def test_a_closed_client_says_so(start_server: StartServer) -> None:
    server = start_server(8)

    async def run() -> None:
        client = AsyncClient([server.grpc_addr], buffer=BufferConfig())
        assert await client.next_id() > 0
        await client.close()
        with pytest.raises(ClientClosedError):
            await client.next_id()

    asyncio.run(run())


def test_uuids_are_version_7_increasing_and_decode(start_server: StartServer) -> None:
    server = start_server(11)

    async def run() -> None:
        async with AsyncClient([server.grpc_addr]) as client:
            first = await client.next_uuid()
            assert isinstance(first, uuid.UUID)
            assert (first.version, first.variant) == (7, uuid.RFC_4122)
            d = decode_uuid(first)
            assert d.slot == 11 == decode(d.id).worker_id
            assert abs(d.unix_ms - time.time() * 1000) < 1000
            one = await client.batch_uuids(1)
            assert len(one) == 1 and one[0] > first
            batch = await client.batch_uuids(1000, timeout=5)
            assert len(batch) == 1000
            assert_uuids_increase([first, *one, *batch])
            assert all(u.version == 7 and decode_uuid(u).slot == 11 for u in batch)
            after = await client.next_uuid()
            assert after > batch[-1]
            assert str(after) > str(batch[-1])

    asyncio.run(run())
    assert server.requests("NextUuid") == 2
    assert server.requests("BatchUuids") == 2


def test_batch_uuids_of_zero_is_the_servers_invalid_argument(start_server: StartServer) -> None:
    first, second = start_server(12), start_server(13)

    async def run() -> None:
        async with AsyncClient([first.grpc_addr, second.grpc_addr]) as client:
            with pytest.raises(grpc.RpcError) as error:
                await client.batch_uuids(0)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert not isinstance(error.value, UnavailableError)
            with pytest.raises(ValueError):
                await client.batch_uuids(2**32)

    asyncio.run(run())
    assert first.requests("BatchUuids") == 1
    assert second.requests("BatchUuids") == 0, "the error was failed over"


def test_uuid_calls_fail_over_as_id_calls_do(start_server: StartServer, tmp_path: Path) -> None:
    down, up = start_server(14), start_server(15)
    down.kill()
    write_refusing_state(tmp_path, 16)
    refusing = start_server(16, tmp_path)

    async def run() -> None:
        for endpoints in ([down.grpc_addr, up.grpc_addr], [refusing.grpc_addr, up.grpc_addr]):
            async with AsyncClient(endpoints, timeout=0.5) as client:
                assert decode_uuid(await client.next_uuid()).slot == 15
                assert decode(await client.next_id()).worker_id == 15
                assert {decode_uuid(u).slot for u in await client.batch_uuids(10)} == {15}
        async with AsyncClient([refusing.grpc_addr], timeout=0.3) as alone:
            with pytest.raises(UnavailableError):
                await alone.next_uuid()
            with pytest.raises(UnavailableError):
                await alone.batch_uuids(5)

    asyncio.run(run())
    assert up.requests("NextUuid") == 2


def test_sequence_values_over_asyncio(start_server: StartServer, snowmint_bin: str, tmp_path: Path) -> None:
    subprocess.run(
        [snowmint_bin, "sequence", "create", "orders", "--state-dir", str(tmp_path)], check=True, capture_output=True
    )
    server = start_server(19, tmp_path)

    async def main() -> list[int]:
        async with AsyncClient([server.grpc_addr]) as client:
            values = [await client.next_value("orders"), *await client.batch_values("orders", 5)]
            with pytest.raises(grpc.RpcError) as error:
                await client.batch_values("orders", 0)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            return values

    assert asyncio.run(main()) == [1, 2, 3, 4, 5, 6]
