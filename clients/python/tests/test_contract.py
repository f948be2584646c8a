"""The rules of clients/README.md that both clients keep alike, against real servers (issue 30):
the two errors a call ends with, close(), the retry pauses and the rate-of-use buffer."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from conftest import StartServer, assert_unique, write_refusing_state

from snowmint_client import (
    AsyncClient,
    BufferConfig,
    Client,
    ClientClosedError,
    DeadlineExceededError,
    UnavailableError,
)


@pytest.mark.parametrize("buffer", [None, BufferConfig()], ids=["unbuffered", "buffered"])
def test_a_calls_own_timeout_raises_deadline_exceeded_buffered_or_not(
    start_server: StartServer, buffer: BufferConfig | None
) -> None:
    hung = start_server(30)
    hung.pause()
    for _ in range(2):
        with Client([hung.grpc_addr], timeout=0.2, attempts=2, buffer=buffer) as client:
            start = time.monotonic()
            with pytest.raises(DeadlineExceededError):
                client.next_id(timeout=0.15)
            assert time.monotonic() - start < 0.6
        with (
            Client([hung.grpc_addr], timeout=0.2, attempts=2, buffer=buffer) as client,
            pytest.raises(UnavailableError),
        ):
            client.next_id()

    async def run() -> None:
        async with AsyncClient([hung.grpc_addr], timeout=0.2, attempts=2, buffer=buffer) as client:
            with pytest.raises(DeadlineExceededError):
                await client.next_id(timeout=0.15)

    asyncio.run(run())


@pytest.mark.parametrize("buffer", [None, BufferConfig()], ids=["unbuffered", "buffered"])
def test_close_ends_every_waiting_call(start_server: StartServer, buffer: BufferConfig | None) -> None:
    hung = start_server(31)
    hung.pause()
    client = Client([hung.grpc_addr], timeout=10, buffer=buffer)
    errors: list[BaseException] = []

    def call(do: Callable[[], object]) -> None:
        try:
            do()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=call, args=(client.next_id,)) for _ in range(3)]
    threads.append(threading.Thread(target=call, args=(lambda: client.batch(5),)))
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    closed = time.monotonic()
    client.close()
    for thread in threads:
        thread.join(5)
    assert time.monotonic() - closed < 0.5, "the waiting calls did not end at close()"
    assert len(errors) == 4 and all(isinstance(e, ClientClosedError) for e in errors), errors

    async def run() -> list[BaseException]:
        aclient = AsyncClient([hung.grpc_addr], timeout=10, buffer=buffer)
        calls: list[Awaitable[object]] = [aclient.next_id() for _ in range(3)]
        calls.append(aclient.batch(5))
        tasks = [asyncio.ensure_future(c) for c in calls]
        await asyncio.sleep(0.3)
        await asyncio.wait_for(aclient.close(), 1)
        done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 1)
        return [d for d in done if isinstance(d, BaseException)]

    errors = asyncio.run(run())
    assert len(errors) == 4 and all(isinstance(e, ClientClosedError) for e in errors), errors


def test_pauses_start_once_every_endpoint_was_tried(start_server: StartServer, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_refusing_state(tmp_path / "a", 32)
    write_refusing_state(tmp_path / "b", 33)
    a, b = start_server(32, tmp_path / "a"), start_server(33, tmp_path / "b")
    with Client([a.grpc_addr, b.grpc_addr], attempts=6) as client:
        with pytest.raises(UnavailableError):
            client.batch(1)
        start = time.monotonic()
        with pytest.raises(UnavailableError):
            client.batch(1)
        took = time.monotonic() - start
    # A, B, 10 ms, A, 20 ms, B, 40 ms, A, 80 ms, B; 300 ms if the pauses doubled from the start.
    assert 0.150 <= took < 0.290, f"6 attempts over 2 refusing servers took {took * 1000:.0f} ms"


def test_the_buffer_refills_at_the_rate_of_use(start_server: StartServer) -> None:
    server = start_server(34)
    with Client([server.grpc_addr], buffer=BufferConfig()) as client:
        time.sleep(0.3)
        assert server.requests("BatchIds") == 0, "a buffered client fetched IDs before it was used"
        ids: list[int] = []
        start = time.monotonic()
        for n in range(40):
            time.sleep(max(0.0, start + n * 0.1 - time.monotonic()))
            ids.append(client.next_id())
    assert_unique(ids)
    minted = server.issued()
    assert minted <= 3 * len(ids) + 20, f"{minted} IDs minted for {len(ids)} used in 4 s"


def test_the_buffer_fits_a_server_with_a_small_max_batch(start_server: StartServer) -> None:
    server = start_server(35, None, "--max-batch", "50")
    with Client([server.grpc_addr], buffer=BufferConfig()) as client:
        ids = [client.next_id() for _ in range(500)]
    assert_unique(ids)


def test_the_asyncio_buffer_lets_other_tasks_run(start_server: StartServer) -> None:
    # A caller looping on buffered IDs gives the event loop a turn now and then: else the
    # refills it starts are neither sent nor answered before the buffer runs dry (issue 30).
    server = start_server(36)

    async def run() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0)
                ticks += 1

        async with AsyncClient([server.grpc_addr], buffer=BufferConfig(batch=4096)) as client:
            for _ in range(5000):
                await client.next_id()  # the rate climbs, the buffer fills ahead
            task = asyncio.ensure_future(ticker())
            await asyncio.sleep(0)
            before = ticks
            for _ in range(3000):
                await client.next_id()
            during = ticks - before
            task.cancel()
        return during

    assert asyncio.run(run()) > 0, "3,000 buffered next_id() calls never let another task run"
