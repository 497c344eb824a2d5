"""bench/e2e.py's clients: sockets watching chats, and JSON posts."""
from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import Callable
from typing import Any

from _servers import (
    stamp,
)

# --- clients -------------------------------------------------------------------------------------
from _e2e.common import NONCE, WAIT


def client_session(limit: int = 0) -> Any:
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit),
                                 timeout=aiohttp.ClientTimeout(total=WAIT))


class Watchers:
    """WebSocket clients in this event loop, recording when each one gets the messages
    the bench waits for (registered with `expect`; matched by the nonce in their content):
    a user message's delivery latency (wall clock at receipt − its created_at), and the
    reply's arrival (perf_counter)."""

    def __init__(self) -> None:
        self.expected: set[str] = set()
        self.latency_ms: dict[str, list[float]] = {}
        self.replies: dict[str, int] = {}
        self.reply_at: dict[str, float] = {}
        self.connected = 0
        self.tasks: list[asyncio.Task[None]] = []
        self.changed = asyncio.Event()
        self.http: Any = None

    def expect(self, key: str) -> None:
        self.expected.add(key)
        self.latency_ms.setdefault(key, [])
        self.replies.setdefault(key, 0)

    def got(self, key: str) -> int:
        return len(self.latency_ms.get(key, ()))

    async def connect(self, urls: list[str], origin: str | None) -> None:
        """One socket per URL (20 connecting at a time); returns when all are open."""
        import aiohttp

        if self.http is None:  # a session of their own: no request timeout over a socket's life
            self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                              timeout=aiohttp.ClientTimeout(total=None, connect=WAIT))
        gate = asyncio.Semaphore(20)
        self.tasks += [asyncio.create_task(self._watch(self.http, url, origin, gate)) for url in urls]
        target = self.connected + len(urls)
        if not await self.until(lambda: self.connected >= target, 120):
            raise RuntimeError(f"only {self.connected}/{target} WebSockets connected in 120 s")
        # What exists now (the sockets, this process's modules) is left out of full
        # collections, which took ~50 ms here: a pause of the clients is not the server's.
        gc.collect()
        gc.freeze()

    async def _watch(self, http: Any, url: str, origin: str | None, gate: asyncio.Semaphore) -> None:
        import aiohttp

        headers = {"Origin": origin} if origin else {}
        async with gate:
            for attempt in range(5):
                try:
                    ws = await http.ws_connect(url, headers=headers, heartbeat=None, max_msg_size=0,
                                               timeout=aiohttp.ClientWSTimeout(ws_close=5.0))
                    break
                except Exception:
                    if attempt == 4:
                        raise
                    await asyncio.sleep(0.5 * (attempt + 1))
        seen: set[tuple[str, str]] = set()  # this socket's (role, nonce): a catch-up repeat counts once
        async with ws:
            first = True
            async for frame in ws:
                now = time.time()
                if first:  # the "session" event: connected and caught up
                    first = False
                    self.connected += 1
                    self.changed.set()
                self._record(json.loads(frame.data), now, seen)

    def _record(self, event: dict[str, Any], now: float, seen: set[tuple[str, str]]) -> None:
        if event.get("type") != "message.new":
            return
        found = NONCE.search(event.get("content") or "")
        if not found or found.group(1) not in self.expected:
            return
        key, role = found.group(1), event.get("role")
        if (role, key) in seen:
            return
        seen.add((role, key))
        if role == "user":
            created = event["created_at"]
            created = created if isinstance(created, float) else stamp(created)
            self.latency_ms[key].append((now - created) * 1000)
        elif role == "assistant":
            self.replies[key] += 1
            self.reply_at.setdefault(key, time.perf_counter())
        self.changed.set()

    async def until(self, condition: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not condition():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), min(left, 0.5))
            except asyncio.TimeoutError:
                pass
        return True

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.http is not None:
            await self.http.close()
        gc.unfreeze()


async def post_json(http: Any, url: str, body: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with http.post(url, json=body, headers=headers) as response:
        if response.status not in (200, 201):
            raise RuntimeError(f"POST {url} answered {response.status}: {(await response.text())[:200]}")
        return dict(await response.json())
