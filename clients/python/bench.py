"""IDs per second one caller gets from a buffered client, to set beside
``snowmint bench --method buffered --concurrency 1`` (the Rust client):

    .venv/bin/python bench.py --addr 127.0.0.1:50051 --duration 5 [--asyncio]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from snowmint_client import AsyncClient, BufferConfig, Client

CHUNK = 1024  # IDs between looks at the clock


def run_blocking(endpoints: list[str], duration: float) -> tuple[int, float]:
    with Client(endpoints, buffer=BufferConfig()) as client:
        client.next_id()  # the connection is open before the clock starts
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < duration:
            for _ in range(CHUNK):
                client.next_id()
            count += CHUNK
        return count, time.perf_counter() - start


async def run_asyncio(endpoints: list[str], duration: float) -> tuple[int, float]:
    async with AsyncClient(endpoints, buffer=BufferConfig()) as client:
        await client.next_id()
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < duration:
            for _ in range(CHUNK):
                await client.next_id()
            count += CHUNK
        return count, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--addr", default="127.0.0.1:50051", help="server endpoints, comma-separated")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds to measure")
    parser.add_argument("--asyncio", action="store_true", help="measure AsyncClient instead of Client")
    args = parser.parse_args()
    endpoints = args.addr.split(",")
    if args.asyncio:
        count, elapsed = asyncio.run(run_asyncio(endpoints, args.duration))
    else:
        count, elapsed = run_blocking(endpoints, args.duration)
    kind = "AsyncClient" if args.asyncio else "Client"
    print(f"python {kind}, buffered, 1 caller: {count} IDs in {elapsed:.2f} s = {count / elapsed:.0f} IDs/s")


if __name__ == "__main__":
    main()
