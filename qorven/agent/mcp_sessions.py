"""MCP sessions kept open between calls, one per server per process.

Opening a session starts a stdio server's process (`npx …` takes a second or more) or
makes an HTTP server's handshake, and a server may keep state from one call to the next
(a browser it drives, a file it opened). So each process keeps the session it opened to a
server, on an event loop thread of its own, and every turn in the process calls through
it. A session is closed:

- once it has had no call for QORVEN_MCP_IDLE seconds;
- when the server's row no longer says what it was opened with (command, URL, token);
- after a call that failed other than by the tool's own error answer, or did not answer
  within QORVEN_MCP_TIMEOUT: the server is not trusted with the next call. That call
  opens a new session. A failed call is not sent again (a tool may have acted before it
  failed); the model reads the failure and may call again.

A forked worker process opens its own (the loop thread is made per process).
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from django.conf import settings

from tenancy.models import McpServer
from tenancy.tool_registry import ToolError

logger = logging.getLogger(__name__)

IDLE_CHECK_EVERY = 0.25  # seconds between a session's looks at its idle time

Work = Callable[[Any], Awaitable[Any]]
Opener = Callable[[McpServer], AbstractAsyncContextManager[Any]]


def _fingerprint(server: McpServer) -> tuple[Any, ...]:
    return server.kind, tuple(server.command or ()), server.url, server.bearer_token


class _Session:
    """One open session, held by a task of its own (the SDK's client must be entered and
    left in the same task); calls run as tasks beside it on the same loop."""

    def __init__(self, server: McpServer, opener: Opener) -> None:
        self.fingerprint = _fingerprint(server)
        self.name = server.name
        self.opened: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.closing = asyncio.Event()
        self.closed = asyncio.Event()
        self.in_flight = 0
        self.last_used = time.monotonic()
        self.holder = asyncio.get_running_loop().create_task(self._hold(server, opener))

    async def _hold(self, server: McpServer, opener: Opener) -> None:
        try:
            async with opener(server) as client:
                self.opened.set_result(client)
                while not self.closing.is_set():
                    try:
                        await asyncio.wait_for(self.closing.wait(), IDLE_CHECK_EVERY)
                    except TimeoutError:
                        idle = time.monotonic() - self.last_used
                        if not self.in_flight and idle > settings.QORVEN_MCP_IDLE:
                            break
        except BaseException as exc:
            if not self.opened.done():
                self.opened.set_exception(exc if isinstance(exc, Exception) else ConnectionError("cancelled"))
            if not isinstance(exc, Exception):
                raise
            logger.info("the session of MCP server %s ended: %r", self.name, exc)
        finally:
            self.closing.set()
            self.closed.set()

    async def call(self, work: Work, timeout: float) -> Any:
        self.in_flight += 1
        try:
            client = await asyncio.wait_for(asyncio.shield(self.opened), timeout)
            return await asyncio.wait_for(work(client), timeout)
        except ToolError:
            raise  # the tool's own error answer: the session is fine
        except BaseException:
            self.closing.set()
            if not self.opened.done():  # still opening: stop it there (a stdio server is stopped)
                self.holder.cancel()
            raise
        finally:
            self.in_flight -= 1
            self.last_used = time.monotonic()


class _Sessions:
    """This process's sessions and the loop thread they live on."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.open: dict[int, _Session] = {}
        threading.Thread(target=self.loop.run_forever, name="qorven-mcp", daemon=True).start()

    async def use(self, server: McpServer, opener: Opener, work: Work, timeout: float) -> Any:
        session = self.open.get(server.pk)
        if session is not None and (session.closing.is_set() or session.fingerprint != _fingerprint(server)):
            session.closing.set()
            session = None
        if session is None:
            session = self.open[server.pk] = _Session(server, opener)
        return await session.call(work, timeout)

    async def close_all(self) -> None:
        sessions, self.open = list(self.open.values()), {}
        for session in sessions:
            session.closing.set()
        await asyncio.gather(*(s.closed.wait() for s in sessions))


_sessions: _Sessions | None = None
_sessions_lock = threading.Lock()


def _here() -> _Sessions:
    global _sessions
    with _sessions_lock:
        if _sessions is None or _sessions.pid != os.getpid():
            _sessions = _Sessions()
        return _sessions


def mcp_call(server: McpServer, opener: Opener, work: Work) -> Any:
    """`await work(client)` on the server's open session (opened now if it has none), from
    sync code. Raises TimeoutError past QORVEN_MCP_TIMEOUT (to open, and to call), the
    tool's ToolError, or what the session failed with."""
    timeout = settings.QORVEN_MCP_TIMEOUT
    sessions = _here()
    future = asyncio.run_coroutine_threadsafe(sessions.use(server, opener, work, timeout), sessions.loop)
    try:
        return future.result(timeout=2 * timeout + 5)  # bounded inside; this only guards the guard
    except TimeoutError:
        future.cancel()
        raise


def mcp_sessions_close(timeout: float = 10.0) -> None:
    """Close this process's sessions (stdio servers exit): for tests and shutdown."""
    sessions = _sessions
    if sessions is None or sessions.pid != os.getpid():
        return
    asyncio.run_coroutine_threadsafe(sessions.close_all(), sessions.loop).result(timeout)
