"""The per-process live hub: one layer subscription per group, however many sockets of this
process watch it; each socket gets each event once; events that arrive while a socket is
still connecting reach it after what it read from the database, in order."""
from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer

from qorven.runtime.hub import Encoder, hub
from qorven.runtime.publisher import broadcast, session_group
from sessions_app.services import message_append, session_resolve

from ..channels_app.live_helpers import communicator, receive_until, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def test_many_sockets_of_one_chat_share_one_subscription_and_each_gets_every_message_once(world):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="assistant", content="Hello!", channel="web", notify=False)
    cookie = session_cookie(world.alice)

    async def run():
        comms = [communicator("/ws/chat/acme/aria/", cookie=cookie) for _ in range(5)]
        for comm in comms:
            assert (await comm.connect())[0]
            await receive_until(comm, lambda e: e["type"] == "message.new" and e["content"] == "Hello!")
        layer = get_channel_layer()
        assert await layer_members(layer, session_group(session.pk)) == 1  # the hub's one channel
        assert len(hub().members[session_group(session.pk)]) == 5
        for n in range(3):
            await sync_to_async(message_append)(session=session, role="user", content=f"m{n}", channel="web",
                                                sender_name="Alice")
        for comm in comms:
            seen = await receive_until(comm, lambda e: e.get("content") == "m2")
            assert [e["content"] for e in seen if e["type"] == "message.new"] == ["m0", "m1", "m2"]
            assert await comm.receive_nothing(0.2)
        for comm in comms:
            await comm.disconnect()
        assert session_group(session.pk) not in hub().members  # the last one out leaves the group
        assert await layer_members(layer, session_group(session.pk)) == 0

    async_to_sync(run)()


def test_a_live_message_sent_while_a_socket_connects_follows_its_catch_up_in_order(world):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="assistant", content="Hello!", channel="web", notify=False)
    cookie = session_cookie(world.alice)

    async def run():
        watcher = communicator("/ws/chat/acme/aria/", cookie=cookie)
        assert (await watcher.connect())[0]  # the hub is subscribed to the session already
        await receive_until(watcher, lambda e: e.get("content") == "Hello!")
        late = communicator("/ws/chat/acme/aria/", cookie=cookie)
        connecting = asyncio.ensure_future(late.connect())
        # Stored and broadcast while the second socket may still be reading the database.
        row = await sync_to_async(message_append)(session=session, role="user", content="during", channel="web",
                                                  sender_name="Alice", notify=False)
        await broadcast(session.pk, {"type": "message.new", "seq": row.message.seq, "role": "user",
                                     "content": "during", "channel": "web"})
        assert (await connecting)[0]
        seen = await receive_until(late, lambda e: e.get("content") == "during")
        contents = [e["content"] for e in seen if e["type"] == "message.new"]
        assert contents == ["Hello!", "during"]
        assert await late.receive_nothing(0.3)  # not twice
        for comm in (watcher, late):
            await comm.disconnect()

    async_to_sync(run)()


def test_the_json_of_equal_frames_is_made_once():
    encoder = Encoder()
    first = encoder.text({"type": "message.new", "seq": 1, "content": "hi"})
    assert encoder.text({"type": "message.new", "seq": 1, "content": "hi"}) is first
    assert encoder.text({"type": "message.new", "seq": 2, "content": "hi"}) == '{"type": "message.new", "seq": 2, "content": "hi"}'


async def layer_members(layer, group: str) -> int:
    """How many channels the layer has in `group` (the in-process layer, or channels_redis')."""
    from qorven.runtime.layers import InMemoryChannelLayer

    if isinstance(layer, InMemoryChannelLayer):
        return len(layer._groups.get(group, ()))
    async with layer.connection(layer.consistent_hash(group)) as connection:
        return await connection.zcard(layer._group_key(group))


def test_after_its_redis_restarts_empty_the_hub_joins_its_groups_again_and_its_sockets_catch_up():
    """A Redis of the test's own, restarted without its data (the hub's group membership
    with it): the hub reads again, joins again, and tells its subscribers to catch up."""
    import socket
    import time

    from channels_redis.core import RedisChannelLayer
    from redis.exceptions import ConnectionError as RedisDown

    from qorven.runtime.hub import RESYNC, Hub

    from ..processes import redis_start

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    redis = redis_start(port)

    class Page:
        def __init__(self) -> None:
            self.events: list[dict] = []

        async def hub_event(self, event, encoder) -> None:
            self.events.append(event)

    async def until(condition, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, "timed out"
            await asyncio.sleep(0.05)

    async def run(page: Page) -> None:
        nonlocal redis
        live = Hub()
        live.layer = RedisChannelLayer(hosts=[{"address": f"redis://127.0.0.1:{port}/0"}])
        await live.join("chat.1", page)
        await live.layer.group_send("chat.1", {"type": "message.new", "group": "chat.1", "seq": 1})
        await until(lambda: [e.get("seq") for e in page.events] == [1])
        redis.terminate()
        redis.wait(10)
        redis = await asyncio.to_thread(redis_start, port)  # empty: the hub's membership is gone
        await until(lambda: RESYNC in page.events)
        for _ in range(3):  # the sender's pooled connection went with the old server: once more, as publishers do
            try:
                await live.layer.group_send("chat.1", {"type": "message.new", "group": "chat.1", "seq": 2})
                break
            except RedisDown:
                await asyncio.sleep(0.2)
        await until(lambda: [e.get("seq") for e in page.events if e != RESYNC] == [1, 2])
        live._reader.cancel()
        live._renewer.cancel()
        await live.layer.flush()

    page = Page()
    try:
        async_to_sync(run)(page)
    finally:
        redis.terminate()
        redis.wait(10)
    assert page.events.count(RESYNC) == 1


def test_a_hub_whose_layer_swallowed_its_cancellation_still_stops():
    """A library that catches the hub's cancellation and hands back an event (as Python
    3.11's wait_for can) must not keep the hub reading: a closing loop waits for it."""
    from qorven.runtime.hub import Hub
    from qorven.runtime.layers import InMemoryChannelLayer

    class SwallowingLayer(InMemoryChannelLayer):
        swallowed = 0

        async def receive(self, channel):
            try:
                return await super().receive(channel)
            except asyncio.CancelledError:
                if self.swallowed:
                    raise
                self.swallowed += 1  # once: the cancellation is gone
                return {"type": "message.new", "group": "nobody"}

    class Quiet:
        async def hub_event(self, event, encoder):
            pass

    async def scenario():
        hub = Hub()
        hub.layer = SwallowingLayer()
        await hub.join("chat", Quiet())
        await asyncio.sleep(0.05)  # the reader waits on the layer
        hub._reader.cancel()
        hub._renewer.cancel()
        done, _ = await asyncio.wait({hub._reader, hub._renewer}, timeout=2)
        return len(done), hub.layer.swallowed

    assert async_to_sync(scenario)() == (2, 1)
