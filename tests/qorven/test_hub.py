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
