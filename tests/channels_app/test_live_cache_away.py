"""The chat's socket while the cache (Redis) is away: the text of a reply being written is
kept in the cache, and only that is lost. The socket opens on the timeline, stays open and
hears what comes next; the cache is a Redis server of the test's own, really stopped."""
from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from qorven.runtime.publisher import broadcast_flush
from sessions_app.turn_writes import turn_lease_acquire

from .live_helpers import communicator, receive_until, session_cookie
from .test_live import ALICE_CHAT, append, canonical, new_messages

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_chat_socket_opened_while_the_cache_is_away_shows_the_timeline_and_stays_open(world, cache_redis):
    """Before, the look for a reply being written (stream_snapshot) raised Redis'
    ConnectionError out of the consumer as the socket opened: the page got the timeline,
    then the socket closed, and every reconnect did the same while the cache was away."""
    stop, _ = cache_redis
    session = canonical(world)
    append(session, "are you there?", notify=False)
    assert turn_lease_acquire(session_id=session.pk, owner="worker:turn", seconds=30)  # a reply being written
    stop()
    cookie = session_cookie(world.alice)

    async def scenario():
        comm = communicator(ALICE_CHAT, cookie=cookie)
        assert (await comm.connect())[0]
        events = await receive_until(comm, lambda e: e.get("seq") == 1)
        assert [m["content"] for m in new_messages(events)] == ["are you there?"]
        assert await comm.receive_nothing(timeout=0.5)  # open, and no stream: its text was in the cache
        await sync_to_async(append)(session, "still here")
        await sync_to_async(broadcast_flush)()
        events = await receive_until(comm, lambda e: e.get("seq") == 2)
        assert [m["content"] for m in new_messages(events)] == ["still here"]
        await comm.disconnect()

    async_to_sync(scenario)()
