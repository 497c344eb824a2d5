"""A turn that stops between two model calls of a message (after a tool round) and comes
back on the worker's timer goes on from the rounds it stored: the model reads its own
tool call and the tool's result, and no tool runs twice."""
from __future__ import annotations

import json
import threading
from dataclasses import replace

import pytest

from memory_app.models import Memory
from sessions_app.models import Message
from tenancy.models import Qor

from ..fakes.model_server import error, reply, tool_call
from .test_turns import _until, alice_token, ask, timeline, turn_runs  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

REMEMBER = {"content": "Alice's laptop is a ThinkPad X1", "type": "fact"}


def _resumed(request) -> list[dict]:
    """The conversation part of a request: what follows the system prompt."""
    return request["messages"][1:]


def _assert_resumed_from_its_round(world, model_server, *, resumed_request) -> None:
    question, call, result, answer = timeline(world)
    assert [m.role for m in (question, call, result, answer)] == ["user", "assistant", "tool", "assistant"]
    assert question.answer_state == "answered" and answer.content == "Saved."
    assert Memory.objects.filter(tenant=world.tenant_a).count() == 1  # the tool ran once
    sent = _resumed(resumed_request)
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[0]["content"] == "[web] Alice: Remember that my laptop is a ThinkPad X1"
    assert sent[1]["tool_calls"][0]["function"]["name"] == "remember"
    assert sent[2]["tool_call_id"] == sent[1]["tool_calls"][0]["id"]
    assert json.loads(sent[2]["content"])["saved"] is True


def test_a_message_whose_second_call_fails_transiently_is_asked_again_with_its_tool_round(
    client, world, alice_token, model_server, drain, settings  # noqa: F811
):
    """The model asks for `remember`, the call after the tool's result gets a 503, and the
    turn comes back later. Before, the message came first in the window, after its own
    tool round (the round's rows are settled, the message still pending): the model read
    a tool call and result with no question before them, then the question."""
    settings.QORVEN_MODEL_RETRIES = 0  # the 503 ends this run of the turn
    settings.QORVEN_ANSWER_RETRY_DELAY = 0.1
    model_server.add(tool_call("remember", REMEMBER), error(503), reply("Saved."))
    ask(client, alice_token, "Remember that my laptop is a ThinkPad X1")
    drain()
    assert len(model_server.requests) == 3
    assert timeline(world)[0].answer_attempts == 1  # it came back once
    assert _resumed(model_server.requests[2]) == _resumed(model_server.requests[1])  # as the 503's call was
    _assert_resumed_from_its_round(world, model_server, resumed_request=model_server.requests[2])


def test_a_message_whose_second_call_waits_for_the_capped_routes_slot_goes_on_from_its_tool_round(
    client, world, alice_token, model_server, drain, turn_runs  # noqa: F811
):
    """Aria's route takes one call at once. While Alice's first call (it asks for
    `remember`) holds it, another call joins the route's queue and takes the slot the
    moment it is freed, so Alice's call after the tool round waits for it and her turn
    comes back once it is let go."""
    from qorven.runtime import route_slots

    Qor.objects.filter(pk=world.qor_a.pk).update(main_max_concurrency=1)
    first = threading.Event()
    model_server.add(replace(tool_call("remember", REMEMBER), hold=first))
    ask(client, alice_token, "Remember that my laptop is a ThinkPad X1")
    _until(lambda: model_server.in_flight == 1)
    slots = route_slots._slots(model_server.base_url)
    # Taken elsewhere right after Alice's first call lets the slot go.
    taker = threading.Thread(target=lambda: holder.append(slots.acquire(cap=1, wait=10, lease=30)))
    holder: list = []
    taker.start()
    _until(lambda: route_slots.route_slot_waiting(base_url=model_server.base_url) == 1)
    first.set()
    taker.join(10)
    assert holder and holder[0] is not None
    _until(lambda: "RETRY" in turn_runs)  # its call after the tool round waits
    assert Memory.objects.filter(tenant=world.tenant_a).count() == 1
    model_server.add(reply("Saved."))
    slots.release(holder[0], cap=1)
    drain()
    assert len(model_server.requests) == 2
    _assert_resumed_from_its_round(world, model_server, resumed_request=model_server.requests[1])
    assert Message.objects.filter(tenant=world.tenant_a, role="tool").count() == 1


def test_the_tool_rounds_of_a_message_are_bounded_across_its_turns_come_backs(
    client, world, alice_token, model_server, drain, settings  # noqa: F811
):
    """QORVEN_MAX_TOOL_ROUNDS bounds a message's rounds, not each run of its turn: the
    come-back counts the rounds it stored. Before, each come-back had the whole bound again
    (with 2, a 503 after the first round gave 3 rounds of tools and 5 calls)."""
    settings.QORVEN_MAX_TOOL_ROUNDS = 2
    settings.QORVEN_MODEL_RETRIES = 0
    settings.QORVEN_ANSWER_RETRY_DELAY = 0.1
    model_server.add(tool_call("current_time", {}), error(503))
    model_server.default = tool_call("current_time", {})
    ask(client, alice_token, "loop forever")
    drain()
    assert len(model_server.requests) == 4  # 2 rounds with tools, then one final call without
    assert "tools" not in model_server.requests[-1]
    assert Message.objects.filter(tenant=world.tenant_a, role="tool").count() == 2
    final = timeline(world)[-1]
    assert final.role == "assistant" and "stopped after 2 rounds" in final.content


def _conversation_rows(world) -> list[Message]:
    """The timeline without notices and commands (what a prompt may read)."""
    return [m for m in timeline(world) if not (m.metadata.get("notice") or m.metadata.get("command"))]


def test_a_message_that_failed_after_a_tool_round_is_left_out_of_later_prompts_with_its_round(
    client, world, alice_token, model_server, drain, settings  # noqa: F811
):
    """Out of tries after its tool round, the message fails: the next message's request
    holds neither it nor its round. Before, the failed question was left out but its
    tool call and result were sent, with no question before them (3 history messages
    where 1 belongs)."""
    settings.QORVEN_MODEL_RETRIES = 0
    settings.QORVEN_ANSWER_ATTEMPTS = 1
    model_server.add(tool_call("current_time", {}), error(503), reply("Hello Alice."))
    ask(client, alice_token, "what time is it?")
    drain()
    assert timeline(world)[0].answer_state == "failed"
    ask(client, alice_token, "hello")
    drain()
    assert len(model_server.requests) == 3
    assert _resumed(model_server.requests[2]) == [{"role": "user", "content": "[web] Alice: hello"}]
    assert timeline(world)[-1].content == "Hello Alice."


def test_retry_of_a_message_that_failed_after_a_tool_round_goes_on_from_its_round_once(
    client, world, alice_token, model_server, drain, settings  # noqa: F811
):
    """/retry gives the failed message its answer from the round it stored: the model
    reads the question, its call and the result, and the tool does not run again."""
    settings.QORVEN_MODEL_RETRIES = 0
    settings.QORVEN_ANSWER_ATTEMPTS = 1
    model_server.add(tool_call("remember", REMEMBER), error(503), reply("Saved."))
    ask(client, alice_token, "Remember that my laptop is a ThinkPad X1")
    drain()
    assert timeline(world)[0].answer_state == "failed"
    ask(client, alice_token, "/retry")
    drain()
    assert len(model_server.requests) == 3
    assert _resumed(model_server.requests[2]) == _resumed(model_server.requests[1])  # as the 503's call was
    rows = _conversation_rows(world)
    question, call, result, answer = [m for m in rows if m.content != "/retry"]
    assert [m.role for m in (question, call, result, answer)] == ["user", "assistant", "tool", "assistant"]
    assert question.answer_state == "answered" and (answer.content, answer.metadata["reply_to"]) == ("Saved.", 1)
    assert Memory.objects.filter(tenant=world.tenant_a).count() == 1  # the tool ran once
    sent = _resumed(model_server.requests[2])
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["function"]["name"] == "remember"
    assert json.loads(sent[2]["content"])["saved"] is True



def test_retry_of_a_message_that_failed_after_a_tool_round_reads_the_exchange_answered_meanwhile(
    client, world, alice_token, model_server, drain, settings  # noqa: F811
):
    """The message after the failed one was answered before /retry: the retried message's
    request reads that exchange whole, before the question and its round. Before, it read
    the later answer without the question it answered ("Hello Alice." after nothing)."""
    settings.QORVEN_MODEL_RETRIES = 0
    settings.QORVEN_ANSWER_ATTEMPTS = 1
    model_server.add(tool_call("remember", REMEMBER), error(503), reply("Hello Alice."), reply("Saved."))
    ask(client, alice_token, "Remember that my laptop is a ThinkPad X1")
    drain()
    ask(client, alice_token, "hello")
    drain()
    ask(client, alice_token, "/retry")
    drain()
    assert len(model_server.requests) == 4
    assert Memory.objects.filter(tenant=world.tenant_a).count() == 1  # the tool ran once
    assert Message.objects.filter(tenant=world.tenant_a, role="tool").count() == 1
    sent = _resumed(model_server.requests[3])
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "tool"]
    assert [sent[0]["content"], sent[1]["content"]] == ["[web] Alice: hello", "Hello Alice."]
    assert sent[2]["content"] == "[web] Alice: Remember that my laptop is a ThinkPad X1"
    assert sent[3]["tool_calls"][0]["function"]["name"] == "remember"
    assert sent[4]["tool_call_id"] == sent[3]["tool_calls"][0]["id"]
    assert timeline(world)[0].answer_state == "answered"
    answers = [m for m in _conversation_rows(world) if m.role == "assistant" and not m.tool_calls]
    hello = next(m for m in timeline(world) if m.content == "hello")
    assert [(m.content, m.metadata["reply_to"]) for m in answers] == [("Hello Alice.", hello.seq), ("Saved.", 1)]


def test_a_turn_whose_worker_died_mid_round_goes_on_and_runs_none_of_that_rounds_calls_again(
    world, model_server, drain  # noqa: F811
):
    """The worker stopped after one call of a round ran and before the other's result was
    stored, holding the session's lease. The turn the sweeper starts once the lease ran
    out asks with both calls answered: the stored result and, for the other, that it may
    or may not have taken effect (stored too); neither runs again. Before, the request
    held a call with no result after it, which OpenAI-compatible servers refuse (400):
    the message failed for good with a notice."""
    from datetime import timedelta

    from django.utils import timezone

    from channels_app.sweep import sweep
    from sessions_app.models import Session
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve

    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    question = message_append(session=chat, role="user", content="Remember my laptop and my bike", channel="web",
                              sender_name="Alice", awaits_answer=True).message
    calls = [{"id": "call_1", "type": "function",
              "function": {"name": "remember", "arguments": json.dumps(REMEMBER)}},
             {"id": "call_2", "type": "function",
              "function": {"name": "remember", "arguments": '{"content": "Alice rides a Brompton", "type": "fact"}'}}]
    message_append(session=chat, role="assistant", content="", channel="web", tool_calls=calls,
                   metadata={"reply_to": question.seq})
    message_append(session=chat, role="tool", content='{"saved": true}', channel="web", tool_call_id="call_1",
                   metadata={"reply_to": question.seq, "tool": "remember"})
    Session.objects.filter(pk=chat.pk).update(turn_owner="dead-worker",
                                              turn_lease_until=timezone.now() - timedelta(seconds=1))
    model_server.add(reply("Saved."))

    assert sweep(restart=True).turns == 1
    drain()
    (request,) = model_server.requests
    sent = _resumed(request)
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    assert (sent[2]["tool_call_id"], sent[2]["content"]) == ("call_1", '{"saved": true}')
    assert sent[3]["tool_call_id"] == "call_2" and "may or may not have taken effect" in sent[3]["content"]
    assert not Memory.objects.filter(tenant=world.tenant_a).exists()  # neither call ran (again)
    rows = timeline(world)
    assert [(m.role, m.tool_call_id) for m in rows] == [
        ("user", ""), ("assistant", ""), ("tool", "call_1"), ("tool", "call_2"), ("assistant", "")]
    assert rows[0].answer_state == "answered" and rows[-1].content == "Saved."
