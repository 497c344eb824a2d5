"""The per-process live hub: one layer subscription per group, however many sockets of this
process watch it; each socket gets each event once; events that arrive while a socket is
still connecting reach it after what it read from the database, in order."""
from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer

from qorven.runtime.hub import Encoder, hub
from qorven.runtime.publisher import broadcast, broadcast_flush, session_group
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

from ..channels_app.live_helpers import chat_opened, communicator, receive_until, session_cookie
from ..fakes.slow_link import SlowLink
from ..processes import redis_of_our_own

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
    """How many channels the layer has in `group`: the in-process layer's, channels_redis'
    lists layer's, or (pub/sub) the channels of this process subscribed to the group, once
    Redis counts the subscription."""
    from channels_redis.pubsub import RedisPubSubChannelLayer

    from qorven.runtime.layers import InMemoryChannelLayer

    if isinstance(layer, InMemoryChannelLayer):
        return len(layer._groups.get(group, ()))
    if isinstance(layer, RedisPubSubChannelLayer):
        name = layer._get_group_channel_name(group)
        ours = len(layer.groups.get(name, ()))
        shard = layer._get_shard(name)
        shard._ensure_redis()
        [(_, subscribed)] = await shard._redis.pubsub_numsub(name)
        return ours if subscribed == min(ours, 1) else -1
    async with layer.connection(layer.consistent_hash(group)) as connection:
        return await connection.zcard(layer._group_key(group))


def test_after_its_redis_restarts_empty_the_hub_joins_its_groups_again_and_its_sockets_catch_up():
    """A Redis of the test's own, restarted without its data (the hub's group membership
    with it): the hub reads again, joins again, and tells its subscribers to catch up."""
    import time

    from channels_redis.core import RedisChannelLayer
    from redis.exceptions import ConnectionError as RedisDown

    from qorven.runtime.hub import RESYNC, Hub

    from ..processes import redis_start

    port, redis = redis_of_our_own()

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
        live = Hub(RedisChannelLayer(hosts=[{"address": f"redis://127.0.0.1:{port}/0"}]))
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
        hub = Hub(SwallowingLayer())
        await hub.join("chat", Quiet())
        await asyncio.sleep(0.05)  # the reader waits on the layer
        hub._reader.cancel()
        hub._renewer.cancel()
        done, _ = await asyncio.wait({hub._reader, hub._renewer}, timeout=2)
        return len(done), hub.layer.swallowed

    assert async_to_sync(scenario)() == (2, 1)



def test_on_the_pubsub_layer_a_join_hears_what_another_process_publishes_right_after_it():
    """channels_redis' pub/sub group_add sends SUBSCRIBE and returns before Redis has taken
    it. A socket joins, reads the database, then expects every later event, so the hub's
    join must not return before its subscription is live. The server's link to Redis is
    slower than the worker's (a proxy holds what the server sends for 50 ms); the worker
    publishes the moment the join returns."""
    from channels_redis.pubsub import RedisPubSubChannelLayer

    from qorven.runtime.hub import Hub

    port, redis = redis_of_our_own()

    class Page:
        def __init__(self) -> None:
            self.heard = asyncio.Event()

        async def hub_event(self, event, encoder) -> None:
            self.heard.set()

    async def run() -> int:
        link = SlowLink(port, delay=0.05)
        server_port = await link.start()
        live = Hub(RedisPubSubChannelLayer(hosts=[{"address": f"redis://127.0.0.1:{server_port}/0"}]))
        worker = RedisPubSubChannelLayer(hosts=[{"address": f"redis://127.0.0.1:{port}/0"}])
        missed = 0
        for n in range(5):
            page, group = Page(), f"chat.{n}"
            await live.join(group, page)
            await worker.group_send(group, {"type": "message.chunk", "group": group, "delta": "first"})
            try:
                async with asyncio.timeout(1.0):
                    await page.heard.wait()
            except TimeoutError:
                missed += 1
            await live.leave(group, page)
        live._reader.cancel()
        live._renewer.cancel()
        await asyncio.gather(live._reader, live._renewer, return_exceptions=True)
        await live.layer.flush()
        await worker.flush()
        await link.stop()
        return missed

    try:
        missed = async_to_sync(run)()
    finally:
        redis.terminate()
        redis.wait(10)
    assert missed == 0, f"{missed} of 5 events published right after a join were never heard"


def test_a_message_stored_in_this_process_reaches_its_sockets_without_waiting_for_the_layer_and_once(world):
    """The server's own events are handed to its hub directly: with Redis holding every
    PUBLISH (a pause of the test's own Redis), a message stored here still reaches the
    page at once; the next one waits behind the first one's copy for the layer, in
    order; nothing is sent twice, and events from other processes still come through
    the layer."""
    import subprocess

    from django.test import override_settings

    port, redis = redis_of_our_own()
    layers = {"default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                          "CONFIG": {"hosts": [f"redis://127.0.0.1:{port}/0"]}}}
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="assistant", content="Hello!", channel="web", notify=False)
    cookie = session_cookie(world.alice)

    def redis_cli(*args: str) -> None:
        subprocess.run(["redis-cli", "-p", str(port), *args], check=True, capture_output=True)

    async def run() -> list[str]:
        page = await chat_opened("/ws/chat/acme/aria/", cookie=cookie, first="Hello!")
        await asyncio.to_thread(redis_cli, "CLIENT", "PAUSE", "10000", "WRITE")
        try:
            row = await sync_to_async(message_append)(session=session, role="user", content="while paused",
                                                      channel="web", sender_name="Alice")
            seen = await receive_until(page, lambda e: e.get("content") == "while paused", timeout=5)
            # Queued behind the layer's copy of the first, which Redis holds: it waits its turn.
            await sync_to_async(message_append)(session=session, role="user", content="behind it", channel="web",
                                                sender_name="Alice")
        finally:
            await asyncio.to_thread(redis_cli, "CLIENT", "UNPAUSE")
        assert await sync_to_async(broadcast_flush)()  # the layer's copies have gone out
        elsewhere = get_channel_layer()  # as another process publishes: through the layer only
        await elsewhere.group_send(session_group(session.pk), {
            "type": "message.new", "group": session_group(session.pk), "session_id": session.pk,
            "seq": row.message.seq + 2, "role": "assistant", "content": "from elsewhere", "channel": "web"})
        seen += await receive_until(page, lambda e: e.get("content") == "from elsewhere")
        await page.disconnect()
        await elsewhere.flush()
        return [e["content"] for e in seen if e["type"] == "message.new"]

    try:
        with override_settings(CHANNEL_LAYERS=layers):
            contents = async_to_sync(run)()
    finally:
        redis.terminate()
        redis.wait(10)
    assert contents == ["while paused", "behind it", "from elsewhere"]


def test_the_layers_copy_of_an_event_handed_over_in_this_process_is_dropped():
    """The live sender hands an event to this process's hub and sends it through the layer
    for other processes, naming the hub that had it: the hub does not pass that copy on to
    its subscribers again (for 200 sockets of a chat, a second pass over all of them)."""
    from qorven.runtime.hub import hub

    class Page:
        def __init__(self) -> None:
            self.seqs: list[int] = []

        async def hub_event(self, event, encoder) -> None:
            self.seqs.append(event["seq"])

    async def run() -> list[int]:
        page, group = Page(), session_group(424_242)
        await hub().join(group, page)
        await broadcast(424_242, {"type": "message.new", "seq": 1})  # ours: handed over, and through the layer
        await get_channel_layer().group_send(group, {"type": "message.new", "group": group, "seq": 2})  # another process's
        async with asyncio.timeout(5):
            while len(page.seqs) < 2:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # time for a second copy to arrive, if it were passed on
        await hub().leave(group, page)
        return page.seqs

    assert sorted(async_to_sync(run)()) == [1, 2]  # each once; from two processes, in either order


def test_what_a_request_publishes_is_delivered_outside_that_requests_context(world):
    """A sync view runs under asgiref's executor for its request, and an event the view
    publishes is handed to the hub from that thread. The socket's work on it — after
    /clear, reading the new session — must not run in the request's context: its executor
    is gone once the request ends, and every database call made there failed
    ("CurrentThreadExecutor already quit")."""
    from qorven.agent.gateway import inbound_accept
    from tenancy.trust import Trust

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="assistant", content="Hello!", channel="web", notify=False)
    cookie = session_cookie(world.alice)

    def clear() -> None:
        inbound_accept(session=session, content="/clear", channel="web", sender_name="Alice", trust=Trust.OWNER,
                       user=world.alice)

    async def run() -> list[dict]:
        page = await chat_opened("/ws/chat/acme/aria/", cookie=cookie, first="Hello!")
        for _ in range(6):  # a few requests in a row, as a page's clicks
            # A server thread that runs the view through asgiref, as Django's handlers do:
            # the view runs on that thread, under an executor that quits when it returns.
            await asyncio.to_thread(async_to_sync(sync_to_async(clear)))
            seen = await receive_until(page, lambda e: "Started a fresh conversation" in (e.get("content") or ""),
                                       timeout=5)
        await page.disconnect()
        return seen

    seen = async_to_sync(run)()
    assert [e["type"] for e in seen][-1] == "message.new"


def test_a_join_cancelled_midway_leaves_no_group_behind():
    """A socket closed while it joins (its task cancelled as the join waits on the layer)
    leaves the hub as it found it: an empty group kept for good would hold the hub's
    subscription to that chat, and every later event of it, for the life of the server."""
    from channels_redis.pubsub import RedisPubSubChannelLayer

    from qorven.runtime.hub import Hub

    port, redis = redis_of_our_own()

    class Page:
        async def hub_event(self, event, encoder) -> None:
            pass

    async def run() -> list[str]:
        link = SlowLink(port, delay=0.3)
        server_port = await link.start()
        live = Hub(RedisPubSubChannelLayer(hosts=[{"address": f"redis://127.0.0.1:{server_port}/0"}]))
        await live.join("chat.kept", Page())  # the hub's reader runs
        joining = asyncio.ensure_future(live.join("chat.left", Page()))
        await asyncio.sleep(0.1)  # its note is on its way through the slow link
        joining.cancel()
        await asyncio.gather(joining, return_exceptions=True)
        groups = sorted(live.members)
        live._reader.cancel()
        live._renewer.cancel()
        await asyncio.gather(live._reader, live._renewer, return_exceptions=True)
        await live.layer.flush()
        await link.stop()
        return groups

    try:
        groups = async_to_sync(run)()
    finally:
        redis.terminate()
        redis.wait(10)
    assert groups == ["chat.kept"]


def test_a_socket_closing_as_an_event_reaches_it_is_no_warning_and_the_others_still_get_it(caplog):
    """A client gone a moment before its event (the server's send fails: uvicorn raises
    ClientDisconnected, an OSError) logged a warning with a traceback each time; its
    clean-up follows on its own. The other sockets of the chat get the event."""
    from uvicorn.protocols.utils import ClientDisconnected

    class Gone:
        async def hub_event(self, event, encoder):
            raise ClientDisconnected

    class Here:
        def __init__(self):
            self.seen = []

        async def hub_event(self, event, encoder):
            self.seen.append(event["n"])

    async def run():
        the_hub, here = hub(), Here()
        the_hub.members["chat.closing"] = {Gone(), here}
        try:
            await the_hub.deliver({"type": "message.new", "group": "chat.closing", "n": 1})
        finally:
            del the_hub.members["chat.closing"]
        return here.seen

    with caplog.at_level("DEBUG", logger="qorven.runtime.hub"):
        assert async_to_sync(run)() == [1]
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    assert "closed as an event reached it" in caplog.text


def test_a_socket_closed_while_redis_is_unreachable_leaves_every_group_and_the_hub_leaves_them_on_redis_later(
        world, caplog):
    """A page's socket is in three groups (its chat, its sign-in, its session). Closed while
    Redis could not be reached, it stopped at the first group the layer failed to leave: the
    others kept the closed socket, and the hub's subscriptions to them, for the life of the
    server. Each is left now, one warning says so, and once Redis answers again the hub
    leaves on Redis what it could not (the pub/sub layer subscribes again to every group it
    still holds as it reconnects)."""
    import logging

    from django.test import override_settings

    port, redis = redis_of_our_own()
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="assistant", content="Hello!", channel="web", notify=False)
    cookie = session_cookie(world.alice)

    async def run() -> tuple[list[str], dict, list[int]]:
        link = SlowLink(port, delay=0)  # Redis as the server reaches it, cut and mended by the test
        layers = {"default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                              "CONFIG": {"hosts": [f"redis://127.0.0.1:{await link.start()}/0"]}}}
        with override_settings(CHANNEL_LAYERS=layers):
            page = await chat_opened("/ws/chat/acme/aria/", cookie=cookie, first="Hello!")
            live = hub()
            groups = sorted(live.members)
            await link.cut()
            await page.disconnect()
            left_with = {group: len(members) for group, members in live.members.items()}
            await link.mend()
            counts = await _counts_once_left(live.layer, groups, caplog)
            await _stop(live)
            await link.stop()
        return groups, left_with, counts

    try:
        with caplog.at_level(logging.INFO):
            groups, left_with, counts = async_to_sync(run)()
    finally:
        redis.terminate()
        redis.wait(10)
    assert len(groups) == 3, groups
    assert left_with == {}  # nothing of the closed socket's is kept
    assert counts == [0, 0, 0]  # on Redis too, once it answered again
    _assert_one_warning(caplog)


def test_on_the_lists_layer_too_groups_left_while_redis_is_unreachable_are_left_on_redis_once_it_answers(caplog):
    """channels_redis' lists layer keeps a group's members in Redis: one the hub failed to
    leave there stayed until the group's expiry (a day), its events pushed to this process."""
    import logging

    from channels_redis.core import RedisChannelLayer

    from qorven.runtime.hub import Hub

    port, redis = redis_of_our_own()
    groups = ["chat.1", "chat.2", "chat.3"]

    class Page:
        async def hub_event(self, event, encoder) -> None:
            pass

    async def run() -> tuple[dict, list[int]]:
        link = SlowLink(port, delay=0)
        live = Hub(RedisChannelLayer(hosts=[{"address": f"redis://127.0.0.1:{await link.start()}/0"}]))
        page = Page()
        for group in groups:
            await live.join(group, page)
        await link.cut()
        await live.leave_all(groups, page)
        left_with = dict(live.members)
        await link.mend()
        counts = await _counts_once_left(live.layer, groups, caplog)
        await _stop(live)
        await link.stop()
        return left_with, counts

    try:
        with caplog.at_level(logging.INFO):
            left_with, counts = async_to_sync(run)()
    finally:
        redis.terminate()
        redis.wait(10)
    assert left_with == {}
    assert counts == [0, 0, 0]
    _assert_one_warning(caplog)


def test_on_the_pubsub_layer_groups_left_as_redis_dropped_the_connection_are_left_again_once_it_answers(caplog):
    """Redis dropped the server's connection just as the hub left three groups: the
    UNSUBSCRIBEs were written, so each leave returned, but never reached Redis. redis-py
    forgets a subscription only once Redis confirms its end, and subscribes again to all it
    has not forgotten as it reconnects: the process stayed subscribed to the three groups,
    their events coming to it for nobody, for the life of the server. The hub sees the
    layer kept them and leaves them again."""
    import logging

    from channels_redis.pubsub import RedisPubSubChannelLayer

    from qorven.runtime.hub import Hub

    port, redis = redis_of_our_own()
    groups = ["chat.1", "chat.2", "chat.3"]

    class Page:
        async def hub_event(self, event, encoder) -> None:
            pass

    async def run() -> list[int]:
        link = SlowLink(port, delay=0)
        live = Hub(RedisPubSubChannelLayer(hosts=[{"address": f"redis://127.0.0.1:{await link.start()}/0"}]))
        page = Page()
        for group in groups:
            await live.join(group, page)
        link.delay = 30.0  # what the server sends from now on is still on its way when Redis drops it
        await live.leave_all(groups, page)
        await link.cut()
        link.delay = 0
        await link.mend()
        counts = await _counts_once_left(live.layer, groups, caplog)
        await _stop(live)
        await link.stop()
        return counts

    try:
        with caplog.at_level(logging.INFO):
            counts = async_to_sync(run)()
    finally:
        redis.terminate()
        redis.wait(10)
    assert counts == [0, 0, 0]
    ours = [r for r in caplog.records if r.name.startswith("qorven")]
    assert not [r for r in ours if r.levelno >= logging.WARNING], caplog.text


async def _counts_once_left(layer, groups: list[str], caplog) -> list[int]:
    """layer_members of each group once the hub says it has left them on the layer, and
    Redis has taken that (the count of a connection of its own may come first); as they
    are after 30 s otherwise. On the pub/sub layer the hub says so once Redis has answered
    its leave on the subscribing connection, so that has reconnected by then, subscribed
    again to all it still held."""
    import time

    deadline = time.monotonic() + 30
    while not any("has left" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    while (counts := [await layer_members(layer, group) for group in groups]) != [0] * len(groups):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    return counts


async def _stop(live) -> None:
    tasks = [task for task in (live._reader, live._renewer, live._leaver) if task is not None]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await live.layer.flush()


def _assert_one_warning(caplog) -> None:
    import logging

    ours = [r for r in caplog.records if r.name.startswith(("qorven", "channels_app"))]
    assert [r.levelname for r in ours if "could not leave" in r.getMessage()] == ["WARNING"], caplog.text
    assert not [r for r in ours if r.levelno >= logging.ERROR], caplog.text
