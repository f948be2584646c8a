"""A TCP proxy on loopback that holds every chunk of bytes for a fixed delay before passing it
on, in order, both ways: a network with a round trip of twice the delay, where a call that
waits for a server is plainly slower than one served from a buffer. (These machines have no
`tc netem`.)"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time


class DelayProxy:
    """Forwards 127.0.0.1:<port> to ``upstream`` (host:port) with ``delay`` seconds each way."""

    def __init__(self, upstream: str, delay: float) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self.addr: str = ""
        self._delay = delay
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the delay proxy did not start")
        assert self._server is not None
        self.addr = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            client_writer.close()
            return
        # Cancelled when the proxy closes: that is its end, not a failure.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(
                self._pipe(client_reader, upstream_writer),
                self._pipe(upstream_reader, client_writer),
                return_exceptions=True,
            )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, chunk = await chunks.get()
                if not chunk:
                    break
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(chunk)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        try:
            while chunk := await reader.read(65536):
                chunks.put_nowait((time.monotonic() + self._delay, chunk))
        finally:
            chunks.put_nowait((0.0, b""))
            with contextlib.suppress(Exception):
                await sender
            writer.close()

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
