"""The live sender (qorven.runtime.publisher) past a live layer that hangs: Redis holding
every PUBLISH (a pause of the test's own Redis, `CLIENT PAUSE … WRITE`). The layer's
connections keep no socket timeout (qorven.runtime.live_redis says why), so the sender
bounds its own wait instead, QORVEN_REDIS_TIMEOUT, without cancelling the send held up."""
from __future__ import annotations

import asyncio
import subprocess

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings as django_settings

from qorven.runtime.publisher import broadcast_flush, session_group
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

from ..channels_app.live_helpers import chat_opened, receive_until, session_cookie
from ..processes import redis_of_our_own

pytestmark = pytest.mark.django_db(transaction=True)

BOUND = 0.5  # QORVEN_REDIS_TIMEOUT here


def test_live_events_reach_this_processs_sockets_in_order_while_the_layer_hangs_and_the_layer_after(
    world, settings
):
    """The first message's copy for the layer is held by Redis; the messages after it still
    reach the page within the bound, in order, their copies for the layer dropped (other
    processes' pages catch up from the database by seq). Once Redis answers, the layer
    carries events again and nothing reaches the page twice. Before, every event after the
    held one waited behind it for as long as Redis held it: the page saw nothing more."""
    port, redis = redis_of_our_own()
    settings.QORVEN_REDIS_TIMEOUT = BOUND
    settings.CHANNEL_LAYERS = {"default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [{**django_settings.LIVE_REDIS_HOST, "address": f"redis://127.0.0.1:{port}/0"}]}}}
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="assistant", content="Hello!", channel="web", notify=False)
    cookie = session_cookie(world.alice)

    def redis_cli(*args: str) -> None:
        subprocess.run(["redis-cli", "-p", str(port), *args], check=True, capture_output=True)

    def append(content: str):
        return message_append(session=session, role="user", content=content, channel="web", sender_name="Alice")

    async def run() -> list[str]:
        page = await chat_opened("/ws/chat/acme/aria/", cookie=cookie, first="Hello!")
        await asyncio.to_thread(redis_cli, "CLIENT", "PAUSE", "60000", "WRITE")
        try:
            await sync_to_async(append)("held")
            seen = await receive_until(page, lambda e: e.get("content") == "held", timeout=5)
            for content in ("behind it", "and another"):
                await sync_to_async(append)(content)
            seen += await receive_until(page, lambda e: e.get("content") == "and another", timeout=BOUND + 2)
            assert await sync_to_async(broadcast_flush)(BOUND + 2)  # nothing waits on the layer
        finally:
            await asyncio.to_thread(redis_cli, "CLIENT", "UNPAUSE")
        row = await sync_to_async(append)("after")
        seen += await receive_until(page, lambda e: e.get("content") == "after", timeout=5)
        assert await sync_to_async(broadcast_flush)(5)
        elsewhere = get_channel_layer()  # as another process publishes: through the layer only
        await elsewhere.group_send(session_group(session.pk), {
            "type": "message.new", "group": session_group(session.pk), "session_id": session.pk,
            "seq": row.message.seq + 1, "role": "assistant", "content": "from elsewhere", "channel": "web"})
        seen += await receive_until(page, lambda e: e.get("content") == "from elsewhere", timeout=5)
        assert await page.receive_nothing(0.5)  # the held copy, let go, is not shown again
        await page.disconnect()
        await elsewhere.flush()
        return [e["content"] for e in seen if e["type"] == "message.new"]

    try:
        contents = async_to_sync(run)()
    finally:
        redis.terminate()
        redis.wait(10)
    assert contents == ["held", "behind it", "and another", "after", "from elsewhere"]


def test_a_reply_streaming_while_the_cache_hangs_leaves_at_its_pace_and_the_buffer_catches_up_after(
    hung_redis, settings
):
    """Each chunk is written to the stream buffer (the cache's Redis) before the sender
    lets it leave. With that Redis stopped (SIGSTOP), a write that timed out rests that
    Redis for CACHE_REST (qorven.runtime.redis_rest): ten chunks leave within the timeout
    and a bit, not ten times it; once Redis answers (and the rest is over), the next chunk
    written stores the whole text so far. Before, every chunk waited out the timeout (with
    the default 5 s, a 200-chunk reply took over 16 minutes to reach any page of the
    process)."""
    import time

    from qorven.runtime.publisher import broadcast_soon
    from qorven.runtime.redis_rest import CacheResting
    from qorven.runtime.streams import stream_snapshot

    from ..processes import wait_for

    session = 987_655  # a session id no other test streams on
    sent: list[str] = []

    def chunk(delta: str) -> None:
        sent.append(delta)
        broadcast_soon(session, {"type": "message.chunk", "reply_to": 1, "delta": delta})

    chunk("before ")
    assert broadcast_flush(5)
    hung_redis.hang()
    started = time.monotonic()
    for n in range(10):
        chunk(f"w{n} ")
        assert broadcast_flush(BOUND * 4), f"chunk {n} still waits on the cache"
    assert time.monotonic() - started < BOUND * 4
    hung_redis.answer()

    def caught_up() -> bool:
        chunk(".")
        assert broadcast_flush(5)
        try:
            held = stream_snapshot(session)
        except CacheResting:  # the rest the timeout began is not over yet
            return False
        return held is not None and held["text"] == "".join(sent)

    assert wait_for(caught_up, 10, step=0.3)
    broadcast_soon(session, {"type": "message.done", "reply_to": 1, "seq": 2})
    assert broadcast_flush(5)
