"""The chat page's sockets when the Redis behind the live layer goes away (channels_redis'
lists layer, QORVEN_LIVE_LAYER=lists): a socket open meanwhile is not ended by it, and
catches up from the database once Redis is back; one opened meanwhile is refused with a
clean close the page retries; the log says so once, not once per socket."""
from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

from channels_app.consumers.live_chat import CLOSE_TRY_AGAIN

from .live_helpers import communicator, receive_until, session_cookie

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]

PORT = 6396
ALICE_CHAT = "/ws/chat/acme/aria/"


def _redis(*args: str) -> str:
    return subprocess.run(["redis-cli", "-p", str(PORT), *args], capture_output=True, text=True).stdout.strip()


def _redis_start() -> None:
    subprocess.run(["redis-server", "--port", str(PORT), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                    "--daemonize", "yes"], check=True, capture_output=True)
    deadline = time.monotonic() + 10
    while _redis("ping") != "PONG":
        assert time.monotonic() < deadline, "redis-server did not start"
        time.sleep(0.05)


def _redis_idle() -> None:
    """Wait for the layer's cleaners of messages already received (tasks channels_redis
    fires and never awaits): one still running when Redis stops logs its own traceback,
    which is the library's and not the away-and-back this file is about."""
    deadline = time.monotonic() + 10
    while _redis("--scan", "--pattern", "*$inflight"):
        assert time.monotonic() < deadline, "the layer's in-flight copies were not cleared"
        time.sleep(0.05)


def _redis_stop() -> None:
    _redis("shutdown", "nosave")
    deadline = time.monotonic() + 10
    while _redis("ping") == "PONG":
        assert time.monotonic() < deadline, "redis-server did not stop"
        time.sleep(0.05)


@pytest.fixture
def lists_layer(settings):
    _redis_stop()  # one left by an earlier run that was killed
    _redis_start()
    settings.CHANNEL_LAYERS = {"default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [{**settings.LIVE_REDIS_HOST, "address": f"redis://127.0.0.1:{PORT}/0"}],
                   "capacity": settings.QORVEN_LIVE_CAPACITY},
    }}
    yield
    _redis_stop()


def test_redis_going_away_ends_no_open_socket_and_they_catch_up_once_it_is_back(world, lists_layer, caplog):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="user", content="before", channel="web", sender_name="Alice")
    cookie, bobs = session_cookie(world.alice), session_cookie(world.bob)

    async def scenario():
        pages = [communicator(ALICE_CHAT, cookie=cookie) for _ in range(3)]
        for page in pages:
            assert (await page.connect())[0]
            await receive_until(page, lambda e: e.get("content") == "before")
        caplog.clear()
        with caplog.at_level(logging.INFO):
            await asyncio.to_thread(_redis_stop)
            for page in pages:  # still open, nothing raised
                assert await page.receive_nothing(1.5)
            # Stored meanwhile, its event lost with Redis (another process published it).
            await sync_to_async(message_append)(session=session, role="user", content="meanwhile", channel="web",
                                                sender_name="Alice", notify=False)
            for _ in range(3):  # a chat no socket here follows yet cannot be joined: refused, cleanly
                assert await communicator(ALICE_CHAT, cookie=bobs).connect() == (False, CLOSE_TRY_AGAIN)
            await asyncio.to_thread(_redis_start)
            for page in pages:
                seen = await receive_until(page, lambda e: e.get("content") == "meanwhile", timeout=15)
                assert [e["content"] for e in seen if e["type"] == "message.new"] == ["meanwhile"]
        bob = communicator(ALICE_CHAT, cookie=bobs)  # the page's next try
        assert (await bob.connect())[0]
        assert (await bob.receive_json_from())["type"] == "session"
        for page in [*pages, bob]:
            await page.disconnect()

    async_to_sync(scenario)()
    # Once for the hub (it reads the layer), once for the sockets that could not join: not per socket.
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 2, tracebacks
    # And once each that it works again.
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) <= 4


def test_a_server_whose_pages_all_closed_says_once_that_redis_is_away(world, lists_layer, caplog):
    cookie = session_cookie(world.alice)

    async def scenario():
        page = communicator(ALICE_CHAT, cookie=cookie)
        assert (await page.connect())[0]
        await receive_until(page, lambda e: e["type"] == "session")
        await page.disconnect()  # the hub reads on, for the pages to come
        with caplog.at_level(logging.INFO):
            await asyncio.to_thread(_redis_stop)
            await asyncio.sleep(4)  # the hub tries the layer again every second
            await asyncio.to_thread(_redis_start)

    async_to_sync(scenario)()
    said = [r.getMessage() for r in caplog.records if r.name == "qorven.runtime.hub" and r.levelno >= logging.WARNING]
    assert len(said) == 1, said
