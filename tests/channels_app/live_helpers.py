"""Connecting channels' WebsocketCommunicator to the real ASGI stack (origin check, auth)."""
from __future__ import annotations

import asyncio
from typing import Any

from channels.testing import WebsocketCommunicator
from django.test import Client

from qorven.asgi import application


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def communicator(path: str, *, cookie: str | None = None, origin: str = "http://testserver",
                 headers: list[tuple[bytes, bytes]] | None = None) -> WebsocketCommunicator:
    all_headers = [(b"host", b"testserver")]
    if origin:
        all_headers.append((b"origin", origin.encode()))
    if cookie:
        all_headers.append((b"cookie", f"sessionid={cookie}".encode()))
    return WebsocketCommunicator(application, path, headers=all_headers + list(headers or []))


async def receive_until(comm: WebsocketCommunicator, predicate, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Events up to and including the first that matches `predicate`."""
    seen = []
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            raise AssertionError(f"no matching event within {timeout}s; got {seen}")
        event = await comm.receive_json_from(timeout=left)
        seen.append(event)
        if predicate(event):
            return seen


async def chat_opened(path: str, *, cookie: str, first: str) -> WebsocketCommunicator:
    """A page's socket on `path`, open once it has shown the message `first` and answered
    a ping (a socket answers only once it has finished connecting: joined its groups)."""
    page = communicator(path, cookie=cookie)
    assert (await page.connect())[0]
    await receive_until(page, lambda e: e.get("content") == first)
    await page.send_json_to({"type": "ping"})
    await receive_until(page, lambda e: e["type"] == "pong")
    return page
