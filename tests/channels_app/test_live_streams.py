"""A reply's text so far, as a page opened mid-reply is shown it: only while the turn
writing it still holds its session's lease (the text outlives a worker that died)."""
from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from qorven.runtime.publisher import broadcast
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from sessions_app.turn_writes import turn_lease_acquire

from .live_helpers import communicator, receive_until, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

ALICE_CHAT = "/ws/chat/acme/aria/"


async def _opened(cookie):
    """What a page opened now is sent before it asks anything (up to its first pong)."""
    comm = communicator(ALICE_CHAT, cookie=cookie)
    assert (await comm.connect())[0]
    await comm.send_json_to({"type": "ping"})
    events = await receive_until(comm, lambda e: e["type"] == "pong")
    await comm.disconnect()
    return events


def test_a_reply_whose_worker_died_is_not_shown_as_writing_once_its_lease_ran_out(world):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="user", content="tell me a story", channel="web", sender_name="Alice")
    assert turn_lease_acquire(session_id=session.pk, owner="worker-1:turn", seconds=1)
    cookie = session_cookie(world.alice)

    async def scenario():
        for delta in ("Once ", "upon "):
            await broadcast(session.pk, {"type": "message.chunk", "reply_to": 1, "delta": delta})
        writing = [e for e in await _opened(cookie) if e["type"] == "message.stream"]
        assert writing == [{"type": "message.stream", "reply_to": 1, "text": "Once upon "}]

        await asyncio.sleep(1.2)  # the worker died: nothing renews the lease, and it runs out
        events = await _opened(cookie)
        assert [e["type"] for e in events] == ["session", "message.new", "pong"]
        assert [e.get("content") for e in events if e["type"] == "message.new"] == ["tell me a story"]

        # Its retry takes the lease and writes the reply afresh: that is what a page shows.
        assert await sync_to_async(turn_lease_acquire)(session_id=session.pk, owner="worker-2:turn", seconds=30)
        await broadcast(session.pk, {"type": "message.restart", "reply_to": 1})
        await broadcast(session.pk, {"type": "message.chunk", "reply_to": 1, "delta": "Long ago"})
        writing = [e for e in await _opened(cookie) if e["type"] == "message.stream"]
        assert writing == [{"type": "message.stream", "reply_to": 1, "text": "Long ago"}]

    async_to_sync(scenario)()
