"""The blocking client against real servers."""

from __future__ import annotations

import random
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from conftest import StartServer, assert_increasing, assert_unique, assert_uuids_increase, write_refusing_state

from snowmint_client import (
    BufferConfig,
    Client,
    ClientClosedError,
    UnavailableError,
    _wire,
    decode,
    decode_uuid,
)


def mixed_calls(client: Client, caller: int, rounds: int) -> list[int]:
    """NextID and batches of 1 to 300 in turn; every ID received."""
    rng = random.Random(caller)
    ids: list[int] = []
    for round in range(rounds):
        if round % 2 == 0:
            ids.append(client.next_id(timeout=5))
        else:
            n = rng.randint(1, 300)
            batch = client.batch(n, timeout=5)
            assert len(batch) == n
            assert_increasing(batch)
            ids.extend(batch)
    return ids


def test_many_concurrent_callers_get_unique_ids(start_server: StartServer) -> None:
    server = start_server(1)
    with (
        Client([server.grpc_addr]) as plain,
        Client([f"http://{server.grpc_addr}"], buffer=BufferConfig()) as buffered,
        ThreadPoolExecutor(16) as pool,
    ):
        clients = [plain, buffered] * 8
        results = pool.map(mixed_calls, clients, range(16), [100] * 16)
        ids = [id for result in results for id in result]
    assert len(ids) > 16 * 50
    assert_unique(ids)


def test_failover_when_a_server_is_killed(start_server: StartServer) -> None:
    first, second = start_server(1), start_server(2)
    ids: list[int] = []
    errors: list[BaseException] = []
    killed = threading.Event()
    stop = threading.Event()
    after_kill = 0
    lock = threading.Lock()

    def caller(client: Client, n: int) -> None:
        nonlocal after_kill
        round = 0
        while not stop.is_set():
            try:
                got = [client.next_id()] if (n + round) % 2 == 0 else client.batch(50)
            except BaseException as error:
                errors.append(error)
                return
            with lock:
                ids.extend(got)
                after_kill += killed.is_set()
            round += 1

    with Client([first.grpc_addr, second.grpc_addr], timeout=0.5) as client:
        threads = [threading.Thread(target=caller, args=(client, n)) for n in range(8)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        first.kill()
        killed.set()
        time.sleep(0.7)
        stop.set()
        for t in threads:
            t.join(timeout=10)
        assert not errors, f"calls failed around the kill: {errors[:3]}"
        assert after_kill >= 10, f"only {after_kill} calls succeeded after the kill"
        assert decode(client.next_id()).worker_id == 2
    assert_unique(ids)


def test_a_refusing_server_is_skipped_and_alone_gives_a_retriable_error(
    start_server: StartServer, tmp_path: Path
) -> None:
    write_refusing_state(tmp_path, 3)
    refusing = start_server(3, tmp_path)
    good = start_server(4)

    # The server itself refuses with UNAVAILABLE.
    with grpc.insecure_channel(refusing.grpc_addr) as channel, pytest.raises(grpc.RpcError) as refused:
        channel.unary_unary(_wire.NEXT_ID, _wire.identity, _wire.next_id_response)(b"", timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

    # Listed first, it is skipped for the good one.
    with Client([refusing.grpc_addr, good.grpc_addr]) as client:
        for _ in range(3):
            assert decode(client.next_id()).worker_id == 4
        assert len(client.batch(10)) == 10

    # Alone, it gives a retriable error, with and without a buffer, promptly.
    for buffer in (None, BufferConfig()):
        with Client([refusing.grpc_addr], timeout=0.3, buffer=buffer) as alone:
            start = time.monotonic()
            with pytest.raises(UnavailableError) as unavailable:
                alone.next_id()
            assert time.monotonic() - start < 3
            assert unavailable.value.code == grpc.StatusCode.UNAVAILABLE
            assert "UNAVAILABLE" in str(unavailable.value)
            with pytest.raises(UnavailableError):
                alone.batch(5)


def test_the_buffer_drops_batches_past_their_age(start_server: StartServer) -> None:
    server = start_server(5)
    max_age = 0.2
    ids: list[int] = []
    with Client([server.grpc_addr], buffer=BufferConfig(batch=64, low_water=8, max_refills=1, max_age=max_age)) as c:
        for _ in range(3):
            ids.append(c.next_id())
            # The rest of that batch stays buffered; let it go stale.
            time.sleep(2 * max_age)
            before_ms = time.time() * 1000
            fresh = c.next_id()
            ids.append(fresh)
            # Tick starts are whole milliseconds: allow for the rounding.
            assert decode(fresh).unix_ms >= before_ms - 1, "a stale batch was used"
        ids.extend(c.next_id() for _ in range(1000))
    assert_unique(ids)


def test_other_errors_return_as_they_are_without_failover(start_server: StartServer) -> None:
    first, second = start_server(6), start_server(7)
    with Client([first.grpc_addr, second.grpc_addr]) as client, pytest.raises(grpc.RpcError) as error:
        client.batch(0)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert not isinstance(error.value, UnavailableError)
    assert first.requests("BatchIds") == 1
    assert second.requests("BatchIds") == 0, "the error was failed over"


def test_the_callers_deadline_wins_and_a_closed_client_says_so(start_server: StartServer) -> None:
    server = start_server(8)
    client = Client([server.grpc_addr])
    with pytest.raises(grpc.RpcError) as error:
        client.next_id(timeout=0)
    assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert client.next_id() > 0
    client.close()
    with pytest.raises(ClientClosedError):
        client.next_id()


def test_uuids_are_version_7_increasing_and_decode(start_server: StartServer) -> None:
    server = start_server(11)
    with Client([server.grpc_addr]) as client:
        before_ms = time.time() * 1000
        first = client.next_uuid()
        assert isinstance(first, uuid.UUID)
        assert (first.version, first.variant) == (7, uuid.RFC_4122)
        d = decode_uuid(first)
        assert d.slot == 11 == decode(d.id).worker_id
        assert before_ms - 1000 <= d.unix_ms <= time.time() * 1000 + 1000
        one = client.batch_uuids(1)
        assert len(one) == 1 and one[0] > first
        batch = client.batch_uuids(1000, timeout=5)
        assert len(batch) == 1000
        assert_uuids_increase([first, *one, *batch])
        assert all(u.version == 7 and decode_uuid(u).slot == 11 for u in batch)
        after = client.next_uuid()
        assert after > batch[-1]
        assert str(after) > str(batch[-1])
    assert server.requests("NextUuid") == 2
    assert server.requests("BatchUuids") == 2


def test_batch_uuids_of_zero_is_the_servers_invalid_argument(start_server: StartServer) -> None:
    first, second = start_server(12), start_server(13)
    with Client([first.grpc_addr, second.grpc_addr]) as client, pytest.raises(grpc.RpcError) as error:
        client.batch_uuids(0)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert not isinstance(error.value, UnavailableError)
    assert first.requests("BatchUuids") == 1
    assert second.requests("BatchUuids") == 0, "the error was failed over"
    with Client([first.grpc_addr]) as client, pytest.raises(ValueError):
        client.batch_uuids(2**32)


def test_uuid_calls_fail_over_as_id_calls_do(start_server: StartServer, tmp_path: Path) -> None:
    down, up = start_server(14), start_server(15)
    down.kill()
    write_refusing_state(tmp_path, 16)
    refusing = start_server(16, tmp_path)
    for endpoints in ([down.grpc_addr, up.grpc_addr], [refusing.grpc_addr, up.grpc_addr]):
        with Client(endpoints, timeout=0.5) as client:
            assert decode_uuid(client.next_uuid()).slot == 15
            assert decode(client.next_id()).worker_id == 15
            assert {decode_uuid(u).slot for u in client.batch_uuids(10)} == {15}
    # Alone, a refusing server gives the retriable error.
    with Client([refusing.grpc_addr], timeout=0.3) as alone:
        with pytest.raises(UnavailableError):
            alone.next_uuid()
        with pytest.raises(UnavailableError):
            alone.batch_uuids(5)
    assert up.requests("NextUuid") == 2


def test_sequence_values_come_dense_past_a_server_that_is_down(
    start_server: StartServer, snowmint_bin: str, tmp_path: Path
) -> None:
    subprocess.run(
        [snowmint_bin, "sequence", "create", "orders", "--start", "41", "--state-dir", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    down = start_server(17)
    down.kill()
    up = start_server(18, tmp_path)
    with Client([down.grpc_addr, up.grpc_addr], timeout=0.5) as client:
        values = [client.next_value("orders"), *client.batch_values("orders", 1000, timeout=5)]
        assert values == list(range(41, 41 + 1001))
        with pytest.raises(grpc.RpcError) as error:
            client.next_value("nope")
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
        assert not isinstance(error.value, UnavailableError)
