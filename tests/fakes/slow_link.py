"""A TCP proxy that delays what its clients send: a process farther from a server than
another one (tests of what a slower link lets happen), or one that loses the server for a
while (`cut`, then `mend`)."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class SlowLink:
    """A TCP proxy in front of Redis that holds what its clients send for `delay` seconds
    (what Redis answers passes at once): a server process farther from Redis than a worker.
    A `delay` changed while it runs holds what is sent from then on, on the connections
    already open too (what is held when the link is cut never reaches Redis)."""

    def __init__(self, target_port: int, delay: float) -> None:
        self.target_port, self.delay = target_port, delay
        self.server: asyncio.base_events.Server | None = None
        self.pipes: set[asyncio.Task] = set()

    async def start(self, port: int = 0) -> int:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def cut(self) -> None:
        """The server unreachable: the open connections closed, new ones refused."""
        self.server.close()
        await self.server.wait_closed()
        await self._close_pipes()

    async def mend(self) -> None:
        """The server reachable again, at the same port."""
        await self.start(self.port)

    async def _client(self, reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        for pipe in (self._pipe(reader, up_writer, lambda: self.delay), self._pipe(up_reader, writer, lambda: 0.0)):
            task = asyncio.ensure_future(pipe)
            self.pipes.add(task)

    @staticmethod
    async def _pipe(reader, writer, delay: Callable[[], float]) -> None:
        try:
            while data := await reader.read(65536):
                if held := delay():
                    await asyncio.sleep(held)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _close_pipes(self) -> None:
        for task in self.pipes:
            task.cancel()
        await asyncio.gather(*self.pipes, return_exceptions=True)
        self.pipes.clear()

    async def stop(self) -> None:
        await self._close_pipes()
        self.server.close()

    @classmethod
    @contextmanager
    def in_thread(cls, target_port: int, delay: float) -> Iterator[int]:
        """The proxy on an event loop of its own thread, for synchronous tests: its port."""
        loop = asyncio.new_event_loop()
        link = cls(target_port, delay)
        port = loop.run_until_complete(link.start())
        thread = threading.Thread(target=loop.run_forever, name="slow-link", daemon=True)
        thread.start()
        try:
            yield port
        finally:
            asyncio.run_coroutine_threadsafe(link.stop(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()
