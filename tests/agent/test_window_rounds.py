"""Older, answered tool rounds in a turn's window reach the model whole: every call with a
result right after it, and no result without its call. OpenAI-compatible servers refuse
(400) a request that breaks either, so one such row in the window failed every later
message of the conversation with a notice."""
from __future__ import annotations

import json

import pytest

from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

from ..fakes.model_server import reply
from .test_turns import alice_token, ask, timeline  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def _call(call_id: str, content: str) -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": "remember", "arguments": json.dumps({"content": content, "type": "fact"})}}


def _answered(chat: Session, content: str, *, channel: str = "web") -> Message:
    question = message_append(session=chat, role="user", content=content, channel=channel, sender_name="Alice",
                              awaits_answer=True).message
    Message.objects.filter(pk=question.pk).update(answer_state=Message.Answer.ANSWERED)
    return question


def _chat(world) -> Session:
    return session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)


def _sent(request) -> list[dict]:
    return request["messages"][1:]  # what follows the system prompt


def test_an_answered_round_stored_without_one_of_its_results_goes_with_a_result_that_says_so(
    client, world, alice_token, model_server, drain  # noqa: F811
):
    """An exchange answered long ago holds a round of two calls with one result stored (a
    lenient server took it so). The next message is asked with the missing result filled in
    for the request only (nothing is stored), and answered. Before, the request held the
    call with no result after it: the server refused it (400) and the message failed with a
    notice, as every later message would."""
    chat = _chat(world)
    question = _answered(chat, "Remember my laptop and my bike")
    message_append(session=chat, role="assistant", content="", channel="web", metadata={"reply_to": question.seq},
                   tool_calls=[_call("call_1", "Alice's laptop is a ThinkPad"), _call("call_2", "Alice rides a Brompton")])
    message_append(session=chat, role="tool", content='{"saved": true}', channel="web", tool_call_id="call_1",
                   metadata={"reply_to": question.seq, "tool": "remember"})
    message_append(session=chat, role="assistant", content="Saved.", channel="web", metadata={"reply_to": question.seq})
    stored = len(timeline(world))
    model_server.add(reply("A Brompton."))

    ask(client, alice_token, "What do I ride?")
    drain()

    (request,) = model_server.requests
    sent = _sent(request)
    assert [(m["role"], m.get("tool_call_id")) for m in sent] == [
        ("user", None), ("assistant", None), ("tool", "call_1"), ("tool", "call_2"), ("assistant", None), ("user", None)]
    assert "no result" in json.loads(sent[3]["content"])["error"]
    rows = timeline(world)
    assert len(rows) == stored + 2  # the question and its answer: the filled-in result is not stored
    assert rows[-2].answer_state == "answered" and rows[-1].content == "A Brompton."
    assert not any(m.metadata.get("notice") for m in rows)


def test_a_result_whose_call_is_gone_is_left_out_of_the_request(
    client, world, alice_token, model_server, drain  # noqa: F811
):
    """The call's row of an answered round is gone (pruned), its result stays. The next
    message is asked without that result, and answered. Before, the result went with no
    call before it, which OpenAI refuses (400): the message failed with a notice."""
    chat = _chat(world)
    question = _answered(chat, "Remember my laptop")
    call = message_append(session=chat, role="assistant", content="", channel="web", metadata={"reply_to": question.seq},
                          tool_calls=[_call("call_1", "Alice's laptop is a ThinkPad")]).message
    message_append(session=chat, role="tool", content='{"saved": true}', channel="web", tool_call_id="call_1",
                   metadata={"reply_to": question.seq, "tool": "remember"})
    message_append(session=chat, role="assistant", content="Saved.", channel="web", metadata={"reply_to": question.seq})
    Message.objects.filter(pk=call.pk).delete()
    model_server.add(reply("A ThinkPad."))

    ask(client, alice_token, "Which laptop do I have?")
    drain()

    (request,) = model_server.requests
    assert [m["role"] for m in _sent(request)] == ["user", "assistant", "user"]
    rows = timeline(world)
    assert rows[-1].content == "A ThinkPad." and rows[-2].answer_state == "answered"


def test_a_window_that_starts_between_a_call_and_its_result_leaves_the_result_out(
    client, world, alice_token, model_server, drain  # noqa: F811
):
    """The compaction point falls on a round's call; a message from another surface came in
    while its tool ran, so the window starts with that message and the call's result comes
    after it. The next message is asked without the result, and answered. Before, the
    result went with no call before it (the window only left out results at its very
    start): refused with a 400, the message failed with a notice."""
    chat = _chat(world)
    question = _answered(chat, "Remember my laptop")
    call = message_append(session=chat, role="assistant", content="", channel="web", metadata={"reply_to": question.seq},
                          tool_calls=[_call("call_1", "Alice's laptop is a ThinkPad")]).message
    other = _answered(chat, "And what time is it?")
    message_append(session=chat, role="tool", content='{"saved": true}', channel="web", tool_call_id="call_1",
                   metadata={"reply_to": question.seq, "tool": "remember"})
    message_append(session=chat, role="assistant", content="Saved.", channel="web", metadata={"reply_to": question.seq})
    message_append(session=chat, role="assistant", content="Noon.", channel="web", metadata={"reply_to": other.seq})
    Session.objects.filter(pk=chat.pk).update(compacted_through_seq=call.seq)
    model_server.add(reply("A ThinkPad."))

    ask(client, alice_token, "Which laptop do I have?")
    drain()

    (request,) = model_server.requests
    sent = _sent(request)
    assert [m["role"] for m in sent] == ["user", "assistant", "assistant", "user"]
    assert sent[0]["content"].endswith("And what time is it?")
    assert timeline(world)[-1].content == "A ThinkPad."
