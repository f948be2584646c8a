"""The asyncio client: IDs for many tasks at once from $SNOWMINT_ENDPOINTS."""

import asyncio
import os

from snowmint_client import AsyncClient, BufferConfig


async def main() -> None:
    endpoints = os.environ["SNOWMINT_ENDPOINTS"].split(",")
    async with AsyncClient(endpoints, buffer=BufferConfig()) as client:
        ids = await asyncio.gather(*(client.next_id() for _ in range(100)))
        print(f"{len(set(ids))} distinct IDs, from {min(ids)} to {max(ids)}")


if __name__ == "__main__":
    asyncio.run(main())
