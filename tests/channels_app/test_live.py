"""The live layer through the real ASGI stack (origin check, session and token auth) with
channels' WebsocketCommunicator: who may watch which chat, catch-up by seq, streams."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from qorven.runtime.publisher import broadcast, broadcast_flush
from sessions_app.models import Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from sessions_app.turn_writes import turn_lease_acquire
from tenancy.services import api_token_create

from ..fakes.model_server import reply
from .conftest import pair
from .live_helpers import communicator, receive_until, session_cookie
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

ALICE_CHAT = "/ws/chat/acme/aria/"


def canonical(world, user=None):
    return session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=user or world.alice)


def append(session, content, *, role="user", channel="web", notify=True, **kw):
    return message_append(session=session, role=role, content=content, channel=channel, sender_name="Alice",
                          notify=notify, **kw).message


def new_messages(events):
    return [e for e in events if e["type"] == "message.new"]


def test_a_telegram_message_reaches_the_page_as_message_new_with_its_channel(
    client, world, telegram, platform, model_server, drain
):
    pair(world, "telegram", "42", world.alice)
    # A new session: like a real model, the answer takes a moment before its first token, by
    # which time the page follows the new session (an instant one could arrive whole).
    model_server.add(reply("Noted, Priya.", delay=0.3))
    cookie = session_cookie(world.alice)
    bob_cookie = session_cookie(world.bob)

    async def scenario():
        page = communicator(ALICE_CHAT, cookie=cookie)
        bobs = communicator(ALICE_CHAT, cookie=bob_cookie)  # bob's own chat with the same Qor
        assert (await page.connect())[0] and (await bobs.connect())[0]
        first = await page.receive_json_from()
        assert first == {"type": "session", "session_id": None, "reset": True}
        await bobs.receive_json_from()

        response = await sync_to_async(post_telegram)(client, telegram_update("buy milk", user_id=42))
        assert response.status_code == 200
        events = await receive_until(page, lambda e: e["type"] == "message.done")  # the reply comes first
        await sync_to_async(drain)()
        session = await sync_to_async(Session.objects.get)(user=world.alice)
        assert events[0] == {"type": "session", "session_id": session.pk, "reset": False}
        new = new_messages(events)
        assert [(m["seq"], m["role"], m["channel"], m["content"]) for m in new] == [
            (1, "user", "telegram", "buy milk"), (2, "assistant", "telegram", "Noted, Priya.")]
        assert new[0]["sender_name"] == "Priya" and new[0]["created_at"]
        chunks = [e["delta"] for e in events if e["type"] == "message.chunk"]
        assert "".join(chunks) == "Noted, Priya."
        # Another user's socket hears nothing of it: the first thing it hears is its own chat.
        bobs_chat = await sync_to_async(canonical)(world, world.bob)
        await sync_to_async(append)(bobs_chat, "bob's own")
        heard = await receive_until(bobs, lambda e: e.get("content") == "bob's own")
        assert not any("milk" in str(e) or "Priya" in str(e) for e in heard)
        await page.disconnect()
        await bobs.disconnect()

    async_to_sync(scenario)()


@pytest.mark.parametrize("who", ["anonymous", "charlie", "bad-origin", "foreign-token", "no-such-qor"])
def test_a_socket_outside_the_users_own_chats_is_refused(world, who):
    _, charlie_token = api_token_create(tenant=world.tenant_b, user=world.charlie)
    path, cookie, origin = ALICE_CHAT, None, "http://testserver"
    if who == "charlie":
        cookie = session_cookie(world.charlie)  # a member of globex only
    elif who == "bad-origin":
        cookie, origin = session_cookie(world.alice), "https://evil.example"
    elif who == "foreign-token":
        path = f"{ALICE_CHAT}?token={charlie_token}"
    elif who == "no-such-qor":
        cookie, path = session_cookie(world.alice), "/ws/chat/acme/nobody/"

    async def scenario():
        comm = communicator(path, cookie=cookie, origin=origin)
        connected, _ = await comm.connect()
        assert not connected
        await comm.disconnect()

    async_to_sync(scenario)()


def test_charlie_cannot_hear_alices_chat_even_with_the_same_qor_slug(world):
    session = canonical(world)
    cookie = session_cookie(world.charlie)

    async def scenario():
        comm = communicator("/ws/chat/globex/aria/", cookie=cookie)
        assert (await comm.connect())[0]
        assert (await comm.receive_json_from())["session_id"] is None
        await sync_to_async(append)(session, "private to alice")
        await sync_to_async(broadcast_flush)()
        charlies = await sync_to_async(session_resolve)(tenant=world.tenant_b, qor=world.qor_b, channel="web",
                                                          user=world.charlie)
        await sync_to_async(append)(charlies, "charlie's own")
        heard = await receive_until(comm, lambda e: e.get("content") == "charlie's own")
        assert not any("private to alice" in str(e) for e in heard)
        await comm.disconnect()

    async_to_sync(scenario)()


def test_an_api_token_authenticates_a_socket(world):
    _, token = api_token_create(tenant=world.tenant_a, user=world.alice)
    session = canonical(world)
    append(session, "hello")

    async def scenario():
        comm = communicator(ALICE_CHAT, headers=[(b"authorization", f"Bearer {token}".encode())])
        assert (await comm.connect())[0]
        events = await receive_until(comm, lambda e: e.get("seq") == 1)
        assert [e["content"] for e in new_messages(events)] == ["hello"]
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_token_opens_its_own_workspaces_chat_only_and_its_persons_only(world):
    # Alice is in globex too, and holds an acme token: it opens neither her globex chat
    # (a header or ?token=, alike) nor, naming Bob's session, Bob's acme chat.
    from tenancy.models import Membership

    Membership.objects.create(tenant=world.tenant_b, user=world.alice)
    _, token = api_token_create(tenant=world.tenant_a, user=world.alice)
    bobs = canonical(world, world.bob)
    append(bobs, "bob's own", notify=False)
    bearer = [(b"authorization", f"Bearer {token}".encode())]

    async def scenario():
        for other in (communicator("/ws/chat/globex/aria/", origin="", headers=bearer),
                      communicator(f"/ws/chat/globex/aria/?token={token}")):
            assert await other.connect() == (False, 4403)
        comm = communicator(f"{ALICE_CHAT}?session={bobs.pk}&last_seq=0", origin="", headers=bearer)
        assert (await comm.connect())[0]
        assert await comm.receive_json_from() == {"type": "session", "session_id": None, "reset": True}
        await sync_to_async(append)(bobs, "bob's next")
        await sync_to_async(broadcast_flush)()
        await comm.send_json_to({"type": "ping"})
        heard = await receive_until(comm, lambda e: e["type"] == "pong")
        assert not any("bob's" in str(e) for e in heard)
        await comm.disconnect()

    async_to_sync(scenario)()


def test_reconnecting_with_last_seq_gets_exactly_the_missed_messages(world):
    session = canonical(world)
    for text in ("one", "two", "three"):
        append(session, text)
    broadcast_flush()
    cookie = session_cookie(world.alice)

    async def scenario():
        comm = communicator(f"{ALICE_CHAT}?session={session.pk}&last_seq=1", cookie=cookie)
        assert (await comm.connect())[0]
        events = await receive_until(comm, lambda e: e.get("seq") == 3)
        assert events[0] == {"type": "session", "session_id": session.pk, "reset": False}
        assert [(m["seq"], m["content"]) for m in new_messages(events)] == [(2, "two"), (3, "three")]
        await sync_to_async(append)(session, "four")
        events = await receive_until(comm, lambda e: e.get("seq") == 4)
        assert [(m["seq"], m["content"]) for m in new_messages(events)] == [(4, "four")]
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_fresh_client_gets_the_newest_page_and_scrolls_back_for_the_rest(world, client):
    session = canonical(world)
    for n in range(1, 61):
        append(session, f"m{n}")
    cookie = session_cookie(world.alice)

    async def scenario():
        comm = communicator(ALICE_CHAT, cookie=cookie)
        assert (await comm.connect())[0]
        events = await receive_until(comm, lambda e: e.get("seq") == 60)
        assert events[0]["reset"] is True
        assert [m["seq"] for m in new_messages(events)] == list(range(11, 61))
        await comm.disconnect()

    async_to_sync(scenario)()
    client.force_login(world.alice)
    older = client.get(f"/chat/api/acme/aria/messages?session={session.pk}&before_seq=11").json()
    assert [m["seq"] for m in older["messages"]] == list(range(1, 11))


def test_an_event_the_layer_dropped_is_caught_up_from_the_database(world):
    session = canonical(world)
    cookie = session_cookie(world.alice)

    async def scenario():
        comm = communicator(ALICE_CHAT, cookie=cookie)
        assert (await comm.connect())[0]
        await receive_until(comm, lambda e: e["type"] == "session")
        await sync_to_async(append)(session, "lost on the way", notify=False)  # as if Redis dropped it
        await sync_to_async(append)(session, "delivered")
        events = await receive_until(comm, lambda e: e.get("seq") == 2)
        assert [(m["seq"], m["content"]) for m in new_messages(events)] == [(1, "lost on the way"), (2, "delivered")]
        await comm.disconnect()

    async_to_sync(scenario)()


def test_tool_calls_and_results_are_hidden_but_counted(world):
    session = canonical(world)
    append(session, "what time is it?")
    append(session, "", role="assistant", tool_calls=[{"id": "c1", "type": "function",
                                                      "function": {"name": "current_time", "arguments": "{}"}}])
    append(session, "12:00 UTC", role="tool", tool_call_id="c1")
    cookie = session_cookie(world.alice)

    async def scenario():
        comm = communicator(ALICE_CHAT, cookie=cookie)
        assert (await comm.connect())[0]
        new = new_messages(await receive_until(comm, lambda e: e.get("seq") == 3))
        assert [(m["seq"], m["hidden"], m["content"]) for m in new] == [
            (1, False, "what time is it?"), (2, True, ""), (3, True, "")]
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_fresh_client_opens_on_a_page_of_messages_the_qors_tool_work_takes_no_place(world):
    """After turns that used tools, the page opened on a handful of messages: the tool calls
    and their results, never shown, took the first page's places. The working of a turn
    still under way comes after it, so the page knows how far the chat has got."""
    from channels_app.chat import PAGE

    from .test_chat_page import talk_with_tools

    session = canonical(world)
    shown = talk_with_tools(session, 30)
    append(session, "and now?", notify=False)
    append(session, "", role="assistant", notify=False, tool_calls=[
        {"id": "c9", "type": "function", "function": {"name": "current_time", "arguments": "{}"}}])
    last = append(session, "12:00 UTC", role="tool", tool_call_id="c9", notify=False).seq
    cookie = session_cookie(world.alice)

    async def scenario():
        comm = communicator(ALICE_CHAT, cookie=cookie)
        assert (await comm.connect())[0]
        new = new_messages(await receive_until(comm, lambda e: e.get("seq") == last))
        assert [(m["seq"], m["content"]) for m in new if not m["hidden"]] == [*shown, (last - 2, "and now?")][-PAGE:]
        assert [m["seq"] for m in new if m["hidden"]] == [last - 1, last]
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_reply_still_streaming_on_reconnect_arrives_whole_then_continues(world):
    session = canonical(world)
    append(session, "tell me a story")
    assert turn_lease_acquire(session_id=session.pk, owner="worker:turn", seconds=30)  # the turn writing it
    cookie = session_cookie(world.alice)

    async def chunk(delta):
        await broadcast(session.pk, {"type": "message.chunk", "reply_to": 1, "delta": delta})

    async def scenario():
        await chunk("Once ")
        await chunk("upon ")
        comm = communicator(f"{ALICE_CHAT}?session={session.pk}&last_seq=1", cookie=cookie)
        assert (await comm.connect())[0]
        events = await receive_until(comm, lambda e: e["type"] == "message.stream")
        assert events[-1] == {"type": "message.stream", "reply_to": 1, "text": "Once upon "}
        await chunk("a time")
        events = await receive_until(comm, lambda e: e["type"] == "message.chunk")
        assert events == [{"type": "message.chunk", "reply_to": 1, "delta": "a time", "offset": 10}]
        await sync_to_async(append)(session, "Once upon a time.", role="assistant", metadata={"reply_to": 1})
        await broadcast(session.pk, {"type": "message.done", "reply_to": 1, "seq": 2})
        events = await receive_until(comm, lambda e: e["type"] == "message.done")
        assert [e["type"] for e in events] == ["message.new", "message.done"]
        assert await _snapshot(session.pk) is None  # the stored reply replaces the stream
        await chunk("late")  # a straggler after the reply is stored is not shown:
        await sync_to_async(append)(session, "next")  # the next thing the page hears is this
        events = await receive_until(comm, lambda e: e.get("seq") == 3)
        assert [e["type"] for e in events] == ["message.new"]
        await comm.disconnect()

    async_to_sync(scenario)()


async def _snapshot(session_id):
    from qorven.runtime.streams import stream_snapshot

    return await sync_to_async(stream_snapshot)(session_id)


def test_the_page_follows_the_chat_into_a_new_session_after_clear(world):
    from qorven.agent.gateway import inbound_accept

    session = canonical(world)
    append(session, "old news")
    cookie = session_cookie(world.alice)

    async def scenario():
        comm = communicator(ALICE_CHAT, cookie=cookie)
        assert (await comm.connect())[0]
        await receive_until(comm, lambda e: e.get("seq") == 1)
        await sync_to_async(inbound_accept)(session=session, content="/clear", channel="web", sender_name="Alice",
                                            user=world.alice, trust="owner")
        events = await receive_until(comm, lambda e: e["type"] == "session")
        events += await receive_until(comm, lambda e: e["type"] == "message.new")  # the fresh chat's first
        fresh = await sync_to_async(Session.objects.get)(user=world.alice, state="active")
        assert fresh.pk != session.pk
        assert {"type": "session", "session_id": fresh.pk, "reset": False} in events
        after = events[events.index({"type": "session", "session_id": fresh.pk, "reset": False}):]
        assert new_messages(after) and new_messages(after)[0]["seq"] == 1
        await comm.disconnect()

    async_to_sync(scenario)()


def test_the_in_memory_layer_wakes_a_receiver_on_another_event_loop():
    """Sends from other threads (tasks, the live sender) reach a consumer's loop at once."""
    from qorven.runtime.layers import InMemoryChannelLayer

    layer = InMemoryChannelLayer()
    received: list[float] = []
    ready = threading.Event()

    def consumer_thread():
        async def main():
            name = "specific.inmemory!abc"
            await layer.group_add("g", name)
            ready.set()
            loop = asyncio.get_running_loop()
            for _ in range(20):
                message = await layer.receive(name)
                received.append(loop.time() - message["sent"])

        asyncio.run(main())

    thread = threading.Thread(target=consumer_thread)
    thread.start()
    assert ready.wait(5)

    async def send_all():
        for _ in range(20):
            await asyncio.sleep(0.01)
            # asyncio's clock is time.monotonic on every loop, so the two compare
            await layer.group_send("g", {"type": "x", "sent": time.monotonic()})

    sender = threading.Thread(target=lambda: asyncio.run(send_all()))
    sender.start()
    sender.join(10)
    thread.join(10)
    assert len(received) == 20  # every event crossed from the sending loop to the receiving one


@pytest.mark.parametrize("origin, opens", [
    ("http://testserver", True),
    ("http://testserver:8001", False),  # another port of the same host is another site
    ("https://testserver", False),  # no TLS here, and no proxy said so
    ("http://testserver.evil.example", False),
    ("null", False),
])
def test_a_socket_opens_only_from_this_servers_own_origin(world, origin, opens):
    cookie = session_cookie(world.alice)

    async def attempt():
        comm = communicator(ALICE_CHAT, cookie=cookie, origin=origin)
        connected, _ = await comm.connect()
        await comm.disconnect()
        return connected

    assert async_to_sync(attempt)() is opens


@pytest.mark.parametrize("origin, opens", [
    ("https://testserver", True),
    ("http://testserver", False),  # the proxy said the socket is https: so is its page, as Django's CSRF holds
    ("https://testserver:8443", False),
])
def test_behind_a_tls_proxy_a_socket_opens_only_from_the_https_page(world, settings, origin, opens):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    cookie = session_cookie(world.alice)

    async def attempt():
        comm = communicator(ALICE_CHAT, cookie=cookie, origin=origin, headers=[(b"x-forwarded-proto", b"https")])
        connected, _ = await comm.connect()
        await comm.disconnect()
        return connected

    assert async_to_sync(attempt)() is opens


def test_in_legacy_mode_a_terminal_socket_follows_the_terminal_session(world, settings):
    settings.QORVEN_LEGACY_SESSIONS = True
    _, token = api_token_create(tenant=world.tenant_a, user=world.alice)
    terminal = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="tui", user=world.alice)
    web = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    append(terminal, "from the terminal", channel="tui")
    append(web, "from the page")

    async def scenario():
        comm = communicator(f"{ALICE_CHAT}?surface=tui", headers=[(b"authorization", f"Bearer {token}".encode())])
        assert (await comm.connect())[0]
        events = await receive_until(comm, lambda e: e.get("seq") == 1)
        assert events[0]["session_id"] == terminal.pk
        assert [e["content"] for e in new_messages(events)] == ["from the terminal"]
        await comm.disconnect()

    async_to_sync(scenario)()
