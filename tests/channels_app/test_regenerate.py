"""Regenerate (the chat page's button on the newest reply): the message is answered again,
the old answer stays stored but leaves the page and every later prompt, and only the
newest answered message of the person's own chat can be regenerated."""
from __future__ import annotations

import json

import pytest

from sessions_app.models import Message, Session

from ..fakes.model_server import error, reply, tool_call

pytestmark = pytest.mark.django_db(transaction=True)

SEND, AGAIN = "/chat/api/acme/aria/messages", "/chat/api/acme/aria/regenerate"


def post(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def said(request) -> str:
    return json.dumps(request["messages"])


def test_regenerate_answers_again_and_the_old_answer_leaves_the_page_and_the_prompt(
    client, world, model_server, drain
):
    model_server.add(tool_call("current_time", {}), reply("It is noon, roughly."), reply("It is 12:00."),
                     reply("Noted."))
    client.force_login(world.alice)
    post(client, SEND, {"content": "what time is it?"})
    drain()
    session = Session.objects.get(user=world.alice, kind="canonical")
    first = list(Message.objects.filter(session=session).exclude(role="user").values_list("seq", "role"))
    assert [role for _, role in first] == ["assistant", "tool", "assistant"]  # the call, its result, the answer

    response = post(client, AGAIN, {"reply_to": 1})
    assert (response.status_code, response.json()) == (202, {"regenerating": 1})
    drain()

    replies = Message.objects.filter(session=session).exclude(role="user").order_by("seq")
    assert [(m.content, bool(m.metadata.get("superseded"))) for m in replies][-1] == ("It is 12:00.", False)
    assert all(m.metadata.get("superseded") for m in replies if m.seq in dict(first))  # kept, set aside
    assert Message.objects.get(session=session, seq=1).answer_state == "answered"
    again = model_server.requests[2]
    assert "what time is it?" in said(again) and "noon" not in said(again) and "tool_calls" not in said(again)

    shown = [m for m in client.get(SEND).json()["messages"] if not m["hidden"]]
    assert [(m["role"], m["content"]) for m in shown] == [("user", "what time is it?"), ("assistant", "It is 12:00.")]

    post(client, SEND, {"content": "thanks"})
    drain()
    assert "noon" not in said(model_server.requests[3]) and "It is 12:00." in said(model_server.requests[3])


def test_only_the_newest_answered_message_can_be_regenerated(client, world, model_server, drain):
    model_server.add(reply("One."), reply("Two."))
    client.force_login(world.alice)
    post(client, SEND, {"content": "first"})
    post(client, SEND, {"content": "second"})
    drain()
    assert post(client, AGAIN, {"reply_to": 1}).status_code == 409  # an older one
    assert post(client, AGAIN, {"reply_to": 4}).status_code == 409  # a reply, not a message of yours
    assert post(client, AGAIN, {"reply_to": 99}).status_code == 409
    assert post(client, AGAIN, {"reply_to": "3"}).status_code == 400
    assert client.get(AGAIN).status_code == 405
    assert Message.objects.filter(metadata__has_key="superseded").count() == 0
    assert len(model_server.requests) == 2


def test_a_message_still_waiting_cannot_be_regenerated(client, world, model_server, drain):
    model_server.add(error(400, "refused"))
    client.force_login(world.alice)
    post(client, SEND, {"content": "hello"})
    assert post(client, AGAIN, {"reply_to": 1}).status_code == 409  # not answered yet
    drain()
    assert Message.objects.get(seq=1).answer_state == "failed"
    assert post(client, AGAIN, {"reply_to": 1}).status_code == 409  # failed: /retry is for that


def test_another_persons_chat_cannot_be_regenerated(client, world, model_server, drain):
    model_server.add(reply("Hi Alice."))
    client.force_login(world.alice)
    post(client, SEND, {"content": "hello"})
    drain()
    client.force_login(world.bob)  # a member of the same tenant: his own chat has nothing to regenerate
    assert post(client, AGAIN, {"reply_to": 1}).status_code == 409
    client.force_login(world.charlie)  # another tenant's chat: not found
    assert post(client, AGAIN, {"reply_to": 1}).status_code == 404
    assert not Message.objects.filter(metadata__has_key="superseded").exists()


def regenerated(session, times, *, channel="web", question="what time is it?"):
    """A question whose answer was written again `times` times: each replaced answer stays
    stored, marked superseded, as regenerate leaves it. The stored (seq, content) of the
    question and of the answer that stands."""
    from sessions_app.services.append import message_append

    asked = message_append(session=session, role="user", content=question, channel=channel, notify=False).message
    for n in range(times):
        message_append(session=session, role="assistant", content=f"replaced {n}", channel=channel, notify=False,
                       metadata={"reply_to": asked.seq, "superseded": True})
    answer = message_append(session=session, role="assistant", content="It is 12:00.", channel=channel,
                            notify=False, metadata={"reply_to": asked.seq}).message
    return [(asked.seq, asked.content), (answer.seq, answer.content)]


def test_a_page_of_history_holds_a_page_of_messages_replaced_answers_take_no_place(client, world):
    """After answers written again many times, the chat opened on a few messages and "Show
    earlier" brought few or none: the replaced answers, never shown, took the page's places."""
    from channels_app.chat import PAGE
    from sessions_app.services.resolve import session_resolve

    from .test_chat_page import read_back

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    shown = []
    for n in range(30):
        shown += regenerated(session, 3, question=f"q{n}")  # 60 messages shown among 150
    client.force_login(world.alice)
    pages = read_back(client, f"{SEND}?session={session.pk}")
    assert [len(p["messages"]) for p in pages] == [PAGE, 60 - PAGE]
    assert [(m["seq"], m["content"]) for p in reversed(pages) for m in p["messages"]] == shown


def test_terminal_history_counts_the_messages_it_prints_not_replaced_answers(world):
    from sessions_app.services.resolve import session_resolve

    from .test_terminal import following

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="tui", user=world.alice)
    regenerated(session, 1, channel="tui", question="first")
    regenerated(session, 5, channel="tui", question="second")
    with following(world, history=3) as (_, seen):
        pass
    assert [e["content"] for e in seen if e["type"] == "message.new"] == ["It is 12:00.", "second", "It is 12:00."]


def test_the_api_timeline_leaves_out_replaced_answers(client, world):
    """The API's timeline gave every replaced answer as if the Qor had said it (nothing in
    a message says it was replaced), and the replaced answers took places of its limit."""
    from sessions_app.services.resolve import session_resolve
    from tenancy.services import api_token_create

    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    shown = regenerated(session, 1, question="first") + regenerated(session, 3, question="second")
    for query in ({}, {"include": "tools"}):
        got = client.get("/v1/qors/aria/messages", query, HTTP_AUTHORIZATION=f"Bearer {token}").json()["messages"]
        assert [(m["seq"], m["content"]) for m in got] == shown
    got = client.get("/v1/qors/aria/messages", {"limit": 2}, HTTP_AUTHORIZATION=f"Bearer {token}").json()["messages"]
    assert [(m["seq"], m["content"]) for m in got] == shown[-2:]


def test_the_models_history_tool_counts_what_was_said_not_replaced_answers(world):
    """get_history's limit counted replaced answers before leaving them out, so the model
    asking for the last messages got fewer, or none."""
    from sessions_app.services.resolve import session_resolve
    from sessions_app.tools import get_history
    from tenancy.tool_registry import ToolContext

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    shown = regenerated(session, 1, question="first") + regenerated(session, 5, question="second")
    ctx = ToolContext(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, session_id=session.pk, channel="web",
                      trust="owner")
    got = get_history(ctx, {"channel": "web", "limit": 3})
    assert [(m["seq"], m["content"]) for m in got["messages"]] == shown[-3:]


def test_the_summarizer_reads_what_was_said_not_replaced_answers(world):
    """Compaction's summary read each replaced answer as something the Qor said, so what
    the person had thrown away could come back as a note in memory."""
    from memory_app.summarizer.excerpts import excerpt_read
    from sessions_app.services.resolve import session_resolve

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    shown = regenerated(session, 2)
    excerpt = excerpt_read(session=session, after_seq=0, through_seq=shown[-1][0], budget=10_000)
    assert [(m.seq, m.content) for m in excerpt.messages] == shown
    assert (excerpt.through_seq, excerpt.span.count) == (shown[-1][0], 2)


def test_a_fresh_chat_page_opens_on_a_page_of_messages_replaced_answers_take_no_place(world):
    """The socket's first page counted the replaced answers, never shown: after many
    regenerations the chat opened on a few messages."""
    from asgiref.sync import async_to_sync

    from channels_app.chat import PAGE
    from sessions_app.services.resolve import session_resolve

    from .live_helpers import communicator, receive_until, session_cookie

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    shown = []
    for n in range(30):
        shown += regenerated(session, 3, question=f"q{n}")
    cookie = session_cookie(world.alice)

    async def scenario():
        comm = communicator("/ws/chat/acme/aria/", cookie=cookie)
        assert (await comm.connect())[0]
        events = await receive_until(comm, lambda e: e.get("seq") == shown[-1][0])
        new = [e for e in events if e["type"] == "message.new"]
        assert [(m["seq"], m["content"]) for m in new] == shown[-PAGE:]
        await comm.disconnect()

    async_to_sync(scenario)()
