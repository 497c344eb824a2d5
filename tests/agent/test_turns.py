"""A message gets an answer: the agent loop against the scripted model server over HTTP."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from memory_app.models import Memory
from tenancy.models import Qor
from sessions_app.models import Message, Session
from tenancy.services import api_token_create

from ..factories.tenancy import MembershipFactory, UserFactory
from ..fakes.model_server import error, reply, tool_call

pytestmark = pytest.mark.django_db(transaction=True)
URL = "/v1/qors/aria/messages"


@pytest.fixture
def alice_token(world):
    return api_token_create(tenant=world.tenant_a, user=world.alice)[1]


def ask(client, token, content):
    response = client.post(
        URL, data=json.dumps({"content": content}), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 201, response.content
    return response.json()


def timeline(world):
    session = Session.objects.get(tenant=world.tenant_a, user=world.alice, kind="canonical", state="active")
    return list(Message.objects.filter(session=session).order_by("seq"))


def test_a_question_over_the_api_gets_the_models_reply_on_channel_web(client, world, alice_token, model_server, drain):
    world.qor_a.system_prompt = "You are Aria, Alice's assistant."
    world.qor_a.save(update_fields=["system_prompt"])
    model_server.add(reply("Your next meeting is at 3pm."))
    ask(client, alice_token, "What's next on my calendar?")
    drain()

    rows = timeline(world)
    assert [(m.seq, m.role, m.channel, m.content) for m in rows] == [
        (1, "user", "web", "What's next on my calendar?"),
        (2, "assistant", "web", "Your next meeting is at 3pm."),
    ]
    (request,) = model_server.requests
    assert request["model"] == "scripted-model"
    assert request["stream"] is True
    system, *history = request["messages"]
    assert system["role"] == "system"
    assert system["content"].startswith("You are Aria, Alice's assistant.")
    assert system["content"].index("Aria") < system["content"].index("## Using tools")
    assert history == [{"role": "user", "content": "[web] Alice: What's next on my calendar?"}]
    offered = {t["function"]["name"] for t in request["tools"]}
    assert {"memory_search", "remember", "get_history", "current_time"} <= offered


def test_history_from_other_surfaces_is_prefixed_with_channel_and_sender(client, world, alice_token, model_server, drain):
    from qorven.agent.gateway import inbound_accept
    from sessions_app.services.resolve import session_resolve

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    model_server.add(reply("Hi Priya"), reply("Yes, you said hello on Telegram."))
    inbound_accept(session=session, content="hello", channel="telegram", sender_name="Priya", trust="paired")
    drain()
    ask(client, alice_token, "did I say hello?")
    drain()
    history = model_server.requests[1]["messages"][1:]
    assert history == [
        {"role": "user", "content": "[telegram · lower trust] Priya: hello"},  # paired, read in an owner turn
        {"role": "assistant", "content": "Hi Priya"},
        {"role": "user", "content": "[web] Alice: did I say hello?"},
    ]
    rows = timeline(world)
    assert [(m.role, m.channel) for m in rows] == [
        ("user", "telegram"), ("assistant", "telegram"), ("user", "web"), ("assistant", "web")
    ]


def test_a_tool_call_round_trip_stores_the_fact_and_the_final_answer(client, world, alice_token, model_server, drain):
    model_server.add(
        tool_call("remember", {"content": "Alice's laptop is a ThinkPad X1", "type": "fact"}),
        reply("Got it, I'll remember your laptop."),
    )
    ask(client, alice_token, "Remember that my laptop is a ThinkPad X1")
    drain()

    memory = Memory.objects.get()
    assert (memory.tenant, memory.qor, memory.user, memory.type) == (world.tenant_a, world.qor_a, world.alice, "fact")
    assert memory.content == "Alice's laptop is a ThinkPad X1"
    second = model_server.requests[1]["messages"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == "remember"
    assert second[-1]["role"] == "tool"
    assert json.loads(second[-1]["content"])["saved"] is True
    rows = timeline(world)
    assert [m.role for m in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[-1].content == "Got it, I'll remember your laptop."
    assert rows[-1].channel == "web"


def test_bad_tool_arguments_come_back_to_the_model_as_an_error(client, world, alice_token, model_server, drain):
    model_server.add(
        tool_call("remember", "{not json"),
        tool_call("no_such_tool", {}),
        reply("Sorry, I could not save that."),
    )
    ask(client, alice_token, "remember something")
    drain()
    bad_json = json.loads(model_server.requests[1]["messages"][-1]["content"])
    unknown = json.loads(model_server.requests[2]["messages"][-1]["content"])
    assert "not valid JSON" in bad_json["error"]
    assert "unknown or unavailable tool 'no_such_tool'" in unknown["error"]
    assert not Memory.objects.exists()
    assert timeline(world)[-1].content == "Sorry, I could not save that."


def test_two_messages_back_to_back_are_answered_in_order_and_the_second_sees_the_first_reply(
    client, world, alice_token, model_server, drain
):
    model_server.add(reply("First answer.", delay=0.5), reply("Second answer."))
    ask(client, alice_token, "first question")
    ask(client, alice_token, "second question")
    drain()
    rows = timeline(world)
    assert [(m.role, m.content) for m in rows if m.role == "assistant"] == [
        ("assistant", "First answer."), ("assistant", "Second answer.")
    ]
    assert [m.metadata.get("reply_to") for m in rows if m.role == "assistant"] == [1, 2]
    first_request, second_request = model_server.requests
    assert first_request["messages"][-1]["content"] == "[web] Alice: first question"
    assert "second question" not in json.dumps(first_request["messages"])
    assert second_request["messages"][1:] == [
        {"role": "user", "content": "[web] Alice: first question"},
        {"role": "assistant", "content": "First answer."},
        {"role": "user", "content": "[web] Alice: second question"},
    ]


def test_a_model_that_fails_three_times_then_recovers_gives_one_reply(client, world, alice_token, model_server, drain):
    fast = {"retry-after-ms": "10"}
    model_server.add(error(500, headers=fast), error(502, headers=fast), error(503, headers=fast), reply("Back!"))
    ask(client, alice_token, "are you there?")
    drain()
    assert len(model_server.requests) == 4
    assistant = [m for m in timeline(world) if m.role == "assistant"]
    assert [m.content for m in assistant] == ["Back!"]


def test_a_models_retry_after_is_waited_out_on_the_workers_timer_not_holding_up_another_tenant(
    client, world, model_server, drain, settings
):
    """Tenant A's model answers 429 with Retry-After: 20, to as many of A's people at once
    as the worker has slots. Each of those calls slept out the wait on its worker thread,
    four times over (QORVEN_MODEL_RETRIES): every slot was held for over a minute, and
    tenant B's message, for another model, waited all that time unanswered."""
    settings.QORVEN_ANSWER_ATTEMPTS = 1  # the first wait ends A's messages with our notice: the test ends
    Qor.objects.filter(pk=world.qor_a.pk).update(main_model="limited-model")

    def model(body):
        if body["model"] == "limited-model":
            return error(429, "Rate limit reached for limited-model", headers={"Retry-After": "20"})
        return reply("Here you are.")

    model_server.default = model
    for n in range(settings.QORVEN_WORKER_CONCURRENCY):
        person = UserFactory(username=f"busy{n}")
        MembershipFactory(tenant=world.tenant_a, user=person)
        ask(client, api_token_create(tenant=world.tenant_a, user=person)[1], "a question")
    deadline = time.monotonic() + 10
    while len(model_server.requests) < settings.QORVEN_WORKER_CONCURRENCY and time.monotonic() < deadline:
        time.sleep(0.05)

    asked_at = time.monotonic()
    ask(client, api_token_create(tenant=world.tenant_b, user=world.charlie)[1], "quick one")
    while not Message.objects.filter(tenant=world.tenant_b, role="assistant").exists() and time.monotonic() < asked_at + 10:
        time.sleep(0.05)
    waited = time.monotonic() - asked_at
    assert waited < 5, f"tenant B's message waited over {waited:.0f} s for A's rate limit"
    drain()
    assert Message.objects.get(tenant=world.tenant_b, role="assistant").content == "Here you are."
    # A's messages: each asked once, and told in our words (the wait is the worker's, not a thread's).
    limited = [r for r in model_server.requests if r["model"] == "limited-model"]
    assert len(limited) == settings.QORVEN_WORKER_CONCURRENCY
    notices = Message.objects.filter(tenant=world.tenant_a, role="system", metadata__notice="rate_limited")
    assert notices.count() == settings.QORVEN_WORKER_CONCURRENCY
    assert not any("Rate limit reached" in n.content for n in notices)


def _asked_on_tenant_a(client, world, name, content):
    person = UserFactory(username=name)
    MembershipFactory(tenant=world.tenant_a, user=person)
    ask(client, api_token_create(tenant=world.tenant_a, user=person)[1], content)


def _until(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.02)


def test_calls_waiting_for_a_capped_routes_slot_hold_no_worker_slot_from_another_tenant(
    client, world, model_server, drain, settings
):
    """Tenant A's route takes one call at once and its first answer is held until the
    end; the rest of A's people wait for the slot. Each waited on a worker thread: with as
    many of them as the worker has slots, tenant B's message, for another model, waited
    for A's held call to end. Waiting for a slot is not a failure: no try of A's messages
    is used up."""
    from qorven.runtime.route_slots import route_slot_waiting

    settings.QORVEN_ANSWER_ATTEMPTS = 1
    Qor.objects.filter(pk=world.qor_a.pk).update(main_model="slow-model", main_max_concurrency=1)
    slow = []
    first = threading.Event()  # A's first answer: held until B is answered

    def model(body):
        if body["model"] == "slow-model":
            slow.append(body)
            return reply("Slowly.", hold=first if len(slow) == 1 else None)
        return reply("Here you are.")

    model_server.default = model
    for n in range(settings.QORVEN_WORKER_CONCURRENCY):
        _asked_on_tenant_a(client, world, f"busy{n}", "a question")
    _until(lambda: len(slow) == 1 and route_slot_waiting(base_url=model_server.base_url)
           == settings.QORVEN_WORKER_CONCURRENCY - 1)

    ask(client, api_token_create(tenant=world.tenant_b, user=world.charlie)[1], "quick one")
    # Never, had B waited behind A: A's first call answers only once B is answered.
    _until(Message.objects.filter(tenant=world.tenant_b, role="assistant").exists, seconds=30)
    assert len(slow) == 1 and model_server.in_flight == 1  # A's call is still answering
    assert not Message.objects.filter(tenant=world.tenant_a, role="assistant").exists()
    first.set()
    drain()
    assert Message.objects.get(tenant=world.tenant_b, role="assistant").content == "Here you are."
    answers = Message.objects.filter(tenant=world.tenant_a, role="assistant")
    assert [m.content for m in answers] == ["Slowly."] * settings.QORVEN_WORKER_CONCURRENCY
    assert not Message.objects.filter(tenant=world.tenant_a, role="system").exists()
    assert len(slow) == settings.QORVEN_WORKER_CONCURRENCY  # each asked once


def test_messages_waiting_for_a_capped_routes_slot_are_answered_in_arrival_order(
    client, world, model_server, drain, settings
):
    from qorven.runtime.route_slots import route_slot_waiting

    Qor.objects.filter(pk=world.qor_a.pk).update(main_model="slow-model", main_max_concurrency=1)
    asked = []

    def model(body):
        asked.append(body["messages"][-1]["content"])
        return reply("In turn.", delay=2 if len(asked) == 1 else 0)

    model_server.default = model
    _asked_on_tenant_a(client, world, "first", "first")
    _until(lambda: len(asked) == 1)
    _asked_on_tenant_a(client, world, "second", "second")
    _until(lambda: route_slot_waiting(base_url=model_server.base_url) == 1)
    _asked_on_tenant_a(client, world, "third", "third")
    _until(lambda: route_slot_waiting(base_url=model_server.base_url) == 2)
    drain()
    assert [content.rsplit(": ", 1)[-1] for content in asked] == ["first", "second", "third"]
    assert Message.objects.filter(tenant=world.tenant_a, role="assistant", content="In turn.").count() == 3


def test_a_message_that_waited_for_a_slot_still_has_all_its_tries_for_real_failures(
    client, world, alice_token, model_server, drain, settings
):
    """Coming back again and again for a slot is not trying to answer: the message then
    meets a failing model with every one of its QORVEN_ANSWER_ATTEMPTS tries."""
    from qorven.runtime.route_slots import route_slot, route_slot_waiting

    settings.QORVEN_ANSWER_ATTEMPTS = 2
    settings.QORVEN_ANSWER_RETRY_DELAY = 0.1
    settings.QORVEN_MODEL_RETRIES = 0
    Qor.objects.filter(pk=world.qor_a.pk).update(main_max_concurrency=1)
    model_server.add(error(503))
    model_server.default = reply("Got there.")
    with route_slot(base_url=model_server.base_url, cap=1, wait=5, lease=30):  # held elsewhere a while
        ask(client, alice_token, "hello?")
        _until(lambda: route_slot_waiting(base_url=model_server.base_url) == 1)
        time.sleep(2)  # come back for the slot several times
        assert model_server.requests == []
    drain()
    question, answer = timeline(world)
    assert (question.answer_state, question.answer_attempts) == ("answered", 1)  # the 503's one try
    assert answer.content == "Got there."
    assert len(model_server.requests) == 2


def test_a_message_waiting_for_a_slot_past_the_model_deadline_fails_with_the_unavailable_notice(
    client, world, alice_token, model_server, drain, settings
):
    """The wait for a slot, however many times the turn comes back for it, is bounded by
    QORVEN_MODEL_DEADLINE from its first try; then the model counts as unavailable."""
    from qorven.runtime.route_slots import route_slot

    settings.QORVEN_MODEL_DEADLINE = 2
    settings.QORVEN_ANSWER_ATTEMPTS = 1
    Qor.objects.filter(pk=world.qor_a.pk).update(main_max_concurrency=1)
    model_server.default = reply("Too late.")
    started = time.monotonic()
    with route_slot(base_url=model_server.base_url, cap=1, wait=5, lease=30):  # held elsewhere all along
        ask(client, alice_token, "hello?")
        drain()
    assert time.monotonic() - started >= 2
    question, notice = timeline(world)
    assert question.answer_state == "failed" and question.answer_attempts == 1
    assert notice.metadata["notice"] == "rate_limited" and "slot" not in notice.content
    assert model_server.requests == []


def test_a_model_down_for_good_is_tried_a_bounded_number_of_times_then_the_message_fails_with_one_notice(
    client, world, alice_token, model_server, drain, settings
):
    settings.QORVEN_MODEL_RETRIES = 1
    settings.QORVEN_ANSWER_ATTEMPTS = 2
    settings.QORVEN_ANSWER_RETRY_DELAY = 0.1
    model_server.default = error(503, headers={"retry-after-ms": "10"})
    ask(client, alice_token, "hello?")
    drain()
    rows = timeline(world)
    question = rows[0]
    assert (question.role, question.content, question.answer_state) == ("user", "hello?", "failed")
    assert question.answer_attempts == 2
    assert "503" in question.answer_error  # the full error, for the admin
    (notice,) = [m for m in rows if m.role == "system"]
    assert notice.metadata["notice"] == "model_unavailable" and notice.metadata["reply_to"] == 1
    assert "isn't answering" in notice.content and "/retry" in notice.content and notice.channel == "web"
    assert not [m for m in rows if m.role == "assistant"]
    assert len(model_server.requests) == 2 * 2  # two tries of the message, each with one SDK retry

    # The conversation moves on: the next message is answered; the failed one waits for /retry.
    model_server.default = None
    model_server.add(reply("Hello again."), reply("Sorry for the wait."))
    ask(client, alice_token, "now?")
    drain()
    assert [(m.metadata["reply_to"], m.content) for m in timeline(world) if m.role == "assistant"] == [
        (3, "Hello again.")
    ]
    assert "hello?" not in json.dumps(model_server.requests[-1]["messages"])
    ask(client, alice_token, "/retry")
    drain()
    answers = [(m.metadata.get("reply_to"), m.content) for m in timeline(world) if m.role == "assistant"]
    assert answers[-1] == (1, "Sorry for the wait.")
    assert model_server.requests[-1]["messages"][-1]["content"] == "[web] Alice: hello?"


def test_a_refused_message_fails_alone_the_next_one_is_answered_and_retry_resends_only_it(
    client, world, alice_token, model_server, drain
):
    model_server.add(error(400, "Your request was rejected by our content filter.", code="content_filter"))
    ask(client, alice_token, "something the filter dislikes")
    drain()
    model_server.add(reply("Happy to help with that."))
    ask(client, alice_token, "something ordinary")
    drain()

    rows = timeline(world)
    first, notice, second, answer = rows
    assert (first.answer_state, second.answer_state) == ("failed", "answered")
    assert first.answer_attempts == 0  # refused for good at once: no retries
    assert notice.role == "system" and notice.metadata == {"notice": "model_refused", "reply_to": 1}
    assert "refused" in notice.content and "/retry" not in notice.content
    assert "content filter" not in notice.content  # the provider's words never reach a surface
    assert (answer.role, answer.content, answer.metadata["reply_to"]) == ("assistant", "Happy to help with that.", 3)
    # The model was sent the second message without the refused one.
    assert len(model_server.requests) == 2
    sent = json.dumps(model_server.requests[1]["messages"])
    assert "something ordinary" in sent and "filter dislikes" not in sent

    model_server.add(reply("Let me try that one again."))
    ask(client, alice_token, "/retry")
    drain()
    assert len(model_server.requests) == 3
    assert model_server.requests[2]["messages"][-1]["content"] == "[web] Alice: something the filter dislikes"
    first.refresh_from_db()
    assert first.answer_state == "answered"
    assert timeline(world)[-1].content == "Let me try that one again."

    ask(client, alice_token, "/retry")
    drain()
    assert timeline(world)[-1].content == "No message failed, so there is nothing to try again."
    assert len(model_server.requests) == 3


def test_tool_rounds_are_bounded(client, world, alice_token, model_server, drain, settings):
    settings.QORVEN_MAX_TOOL_ROUNDS = 3
    model_server.default = tool_call("current_time", {})
    ask(client, alice_token, "loop forever")
    drain()
    assert len(model_server.requests) == 4  # 3 rounds with tools, then one final call without
    assert "tools" not in model_server.requests[-1]
    final = timeline(world)[-1]
    assert final.role == "assistant" and "stopped after 3 rounds" in final.content


def test_with_no_model_configured_the_offline_provider_answers_with_a_notice(client, world, alice_token, drain, settings):
    settings.QORVEN_MODEL = ""
    ask(client, alice_token, "hello")
    drain()
    final = timeline(world)[-1]
    assert final.role == "assistant"
    assert "No model is configured" in final.content and "QORVEN_MODEL" in final.content
    # The way the README's quick start, `qorven serve`'s line and `qorven doctor` give first.
    assert "`qorven setup`" in final.content
    assert final.metadata["notice"] == "offline"


def test_running_the_turn_task_three_times_at_once_gives_one_reply(world, model_server, drain):
    """Three turn tasks for one waiting message run side by side on the worker's pool
    while the model is slow: one answers, the others find the session held."""
    from qorven.agent.gateway import inbound_accept
    from qorven.agent.tasks import agent_turn
    from sessions_app.services.resolve import session_resolve

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    model_server.add(reply("Only once.", delay=1.0))
    inbound_accept(session=session, content="hi", channel="web", sender_name="Alice", trust="owner")
    agent_turn.delay(world.tenant_a.pk, session.pk)
    agent_turn.delay(world.tenant_a.pk, session.pk)
    drain()
    assert [m.content for m in timeline(world) if m.role == "assistant"] == ["Only once."]
    assert len(model_server.requests) == 1


def test_retry_answers_a_message_the_model_could_not_answer(client, world, alice_token, model_server, drain, settings):
    settings.QORVEN_MODEL_RETRIES = 0
    settings.QORVEN_ANSWER_ATTEMPTS = 1
    model_server.add(error(503))
    ask(client, alice_token, "what's the weather?")
    drain()
    model_server.add(reply("Sunny."))
    ask(client, alice_token, "/retry")
    drain()
    rows = timeline(world)
    assert [(m.role, m.content) for m in rows][2:] == [
        ("user", "/retry"), ("assistant", "Trying again to answer 1 message…"), ("assistant", "Sunny."),
    ]
    assert rows[-1].metadata["reply_to"] == 1
    # The command never reached the model: the retried request ends with the question.
    assert model_server.requests[-1]["messages"][-1]["content"] == "[web] Alice: what's the weather?"
    assert all("/retry" not in json.dumps(r["messages"]) for r in model_server.requests)


def test_help_and_retry_with_nothing_failed_are_answered_without_the_model(client, world, alice_token, model_server, drain):
    ask(client, alice_token, "/help")
    ask(client, alice_token, "/retry")
    drain()
    rows = timeline(world)
    assert rows[1].role == "assistant" and "/retry" in rows[1].content and "/help" in rows[1].content
    assert rows[3].content == "No message failed, so there is nothing to try again."
    assert model_server.requests == []


def test_a_context_length_error_is_retried_once_with_a_smaller_window(client, world, alice_token, model_server, drain):
    from qorven.agent import turn_answer

    seen = []
    turn_answer.context_overflow_hooks.append(lambda session: seen.append(session.pk))
    try:
        model_server.add(error(400, "This model's maximum context length is 8192 tokens", code="context_length_exceeded"),
                         reply("Fits now."))
        ask(client, alice_token, "a long question")
        drain()
    finally:
        turn_answer.context_overflow_hooks.pop()
    assert len(model_server.requests) == 2
    assert len(seen) == 1
    assert [m.content for m in timeline(world) if m.role == "assistant"] == ["Fits now."]


def test_a_message_that_never_fits_fails_alone_and_the_next_one_is_answered(
    client, world, alice_token, model_server, drain
):
    too_long = error(400, "maximum context length exceeded", code="context_length_exceeded")
    model_server.add(too_long, too_long)
    ask(client, alice_token, "a long question")
    drain()
    assert len(model_server.requests) == 2  # tried once more with a smaller window, not looped
    question, notice = timeline(world)
    assert question.answer_state == "failed"
    assert notice.role == "system" and notice.metadata["notice"] == "context_length"
    assert "shorter parts" in notice.content and "/retry" not in notice.content

    model_server.add(reply("Short answer."))
    ask(client, alice_token, "a short one")
    drain()
    assert timeline(world)[-1].content == "Short answer."
    assert "a long question" not in json.dumps(model_server.requests[-1]["messages"])


@pytest.mark.parametrize("change", ["removed", "demoted"])
def test_a_message_waiting_for_its_turn_is_answered_with_the_senders_trust_as_it_is_then(world, model_server, change):
    """Trust is read from the current membership: a message stored while its sender was an
    owner, still waiting (behind another turn, or a retry) when they are removed or made a
    member, gets no answer, or one with a member's tools only."""
    from qorven.agent.turns import turn_process
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve
    from tenancy.models import Membership

    Membership.objects.filter(tenant=world.tenant_a, user=world.bob).update(role="owner")
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.bob)
    message_append(session=session, role="user", content="clear my calendar", channel="web", sender_name="Bob",
                   awaits_answer=True, notify=False, metadata={"trust": "owner"})
    if change == "removed":
        Membership.objects.filter(tenant=world.tenant_a, user=world.bob).delete()
    else:
        Membership.objects.filter(tenant=world.tenant_a, user=world.bob).update(role="member")
    model_server.default = reply("Done.")
    turn_process(tenant_id=world.tenant_a.pk, session_id=session.pk)
    asked = Message.objects.get(session=session, role="user")
    if change == "removed":
        assert model_server.requests == [] and asked.answer_state == "failed"
    else:
        (request,) = model_server.requests
        offered = {t["function"]["name"] for t in request.get("tools", [])}
        from tenancy.tool_registry import registry
        owners_only = {t.name for t in registry.offered(tenant=world.tenant_a, qor=world.qor_a, trust="owner")} - {
            t.name for t in registry.offered(tenant=world.tenant_a, qor=world.qor_a, trust="paired")}
        assert owners_only and not offered & owners_only
        assert asked.answer_state == "answered"


def test_a_public_message_of_someone_with_no_membership_is_answered(world, model_server):
    """Public trust needs no membership: a webchat's anonymous visitor (an account of its
    own, no membership, public trust) is answered, with public tools only."""
    from qorven.agent.turns import turn_process
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve

    from ..factories.tenancy import UserFactory

    visitor = UserFactory(username="visitor-1")
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="webchat", user=visitor)
    message_append(session=session, role="user", content="when do you open?", channel="webchat",
                   sender_name="Visitor", awaits_answer=True, notify=False, metadata={"trust": "public"})
    model_server.default = reply("At nine.")
    turn_process(tenant_id=world.tenant_a.pk, session_id=session.pk)
    assert Message.objects.get(session=session, role="assistant").content == "At nine."


@pytest.fixture
def turn_runs():
    """The end state of each run of a turn task, in order (Celery's own signal)."""
    with _task_runs("qorven.agent.turn") as runs:
        yield runs


@contextmanager
def _task_runs(name: str) -> Iterator[list[str]]:
    """The end state of each run of the task called `name`, in order."""
    from celery import signals

    runs: list[str] = []

    def note(task=None, state=None, **kwargs):
        if getattr(task, "name", "") == name:
            runs.append(state)

    signals.task_postrun.connect(note, weak=False)
    try:
        yield runs
    finally:
        signals.task_postrun.disconnect(note)


def test_a_turn_woken_for_its_slot_ends_the_waiting_turns_own_come_back_at_once(
    client, world, alice_token, model_server, drain, settings, turn_runs
):
    """A freed slot sends the waiting message's turn at once; the turn's own come-back on
    the worker's timer still comes. It ends there: before, finding the woken turn still
    holding the session, it became the session's waiter, up to 12 tries over 100 s."""
    from qorven.runtime.route_slots import route_slot, route_slot_waiting

    Qor.objects.filter(pk=world.qor_a.pk).update(main_max_concurrency=1)
    answer = threading.Event()  # the woken turn's answer: held until the come-back has run
    model_server.default = reply("Woken.", hold=answer)
    try:
        with route_slot(base_url=model_server.base_url, cap=1, wait=5, lease=30):  # held elsewhere
            ask(client, alice_token, "hello?")
            _until(lambda: turn_runs == ["RETRY"] and route_slot_waiting(base_url=model_server.base_url) == 1)
        _until(lambda: model_server.in_flight == 1 and len(turn_runs) == 2)  # the slot taken; the other turn ran
        assert turn_runs == ["RETRY", "SUCCESS"]  # it ended, not waiting for the session
    finally:
        answer.set()
    drain()
    _until(lambda: len(turn_runs) == 3)  # noted after the worker counts it done
    assert turn_runs == ["RETRY", "SUCCESS", "SUCCESS"]
    question, answered = timeline(world)
    assert question.answer_state == "answered" and answered.content == "Woken."
    assert len(model_server.requests) == 1


def test_a_message_whose_wake_is_lost_is_still_answered_once_by_its_turns_come_back(
    client, world, alice_token, model_server, drain, settings, turn_runs
):
    from qorven.runtime import route_slots

    Qor.objects.filter(pk=world.qor_a.pk).update(main_max_concurrency=1)
    model_server.default = reply("On the timer.")
    slots = route_slots._slots(model_server.base_url)
    held = slots.acquire(cap=1, wait=5, lease=30)
    ask(client, alice_token, "hello?")
    _until(lambda: turn_runs == ["RETRY"] and route_slots.route_slot_waiting(base_url=model_server.base_url) == 1)
    assert len(slots.release(held, cap=1)) == 1  # the wake is due, and never sent
    drain()
    _until(lambda: len(turn_runs) == 2)  # noted after the worker counts it done
    question, answered = timeline(world)
    assert question.answer_state == "answered" and answered.content == "On the timer."
    assert len(model_server.requests) == 1 and turn_runs == ["RETRY", "SUCCESS"]


@contextmanager
def _waiting_for_a_slot_held_elsewhere(client, world, alice_token, model_server, turn_runs) -> Iterator[None]:
    """Alice's "hello?" waits for the one slot of Aria's capped route, held elsewhere
    until the block ends: its turn has come back once, and it holds its place in the queue."""
    from qorven.runtime import route_slots

    Qor.objects.filter(pk=world.qor_a.pk).update(main_max_concurrency=1)
    model_server.default = reply("Never asked.")
    slots = route_slots._slots(model_server.base_url)
    held = slots.acquire(cap=1, wait=5, lease=30)
    try:
        ask(client, alice_token, "hello?")
        _until(lambda: turn_runs == ["RETRY"]
               and route_slots.route_slot_waiting(base_url=model_server.base_url) == 1)
        yield
    finally:
        slots.release(held, cap=1)


@pytest.mark.parametrize("ending", ["budget spent", "sender removed"])
def test_a_waiting_message_that_ends_without_a_model_call_gives_up_its_place_in_the_routes_queue(
    client, world, alice_token, model_server, drain, turn_runs, ending
):
    """A message waiting for a capped route's slot comes back and is failed before any
    call (the tenant's monthly budget spent, its sender removed from the workspace). Its
    place at the head of the route's queue kept every later call to that server, any
    tenant's, waiting until it lapsed (TICKET_PRESENCE, 30 s)."""
    from qorven.runtime import route_slots
    from tenancy.models import Membership
    from tenancy.services import memberships_remove

    with _waiting_for_a_slot_held_elsewhere(client, world, alice_token, model_server, turn_runs):
        if ending == "budget spent":
            world.tenant_a.monthly_token_budget = 0
            world.tenant_a.save(update_fields=["monthly_token_budget"])
        else:
            memberships_remove(memberships=Membership.objects.filter(tenant=world.tenant_a, user=world.alice))
        _until(lambda: len(turn_runs) == 2)  # it came back, and ended
        question = timeline(world)[0]
        assert question.answer_state == "failed"
        assert route_slots.route_slot_waiting(base_url=model_server.base_url) == 0
    drain()
    assert model_server.requests == []


def test_a_turn_woken_for_its_slot_ends_the_come_back_of_a_turn_run_where_its_message_was_stored(
    client, world, model_server, platform, drain, turn_runs, monkeypatch
):
    """A Telegram message's turn runs in the task that stored it, and waits for the slot;
    its come-back is a turn task on the worker's timer. A slot freed before it comes sends
    the message's turn at once, and the come-back ends as it runs: before, it set no
    come-back marker, found the woken turn holding the session and became the session's
    waiter (up to 12 tries over 100 s)."""
    from channels_app.models import Identity
    from channels_app.services import binding_create
    from qorven.runtime import route_slots

    from ..channels_app.payloads import post_telegram, telegram_update

    # The come-back is due after the slot is freed and the woken turn took it.
    monkeypatch.setattr(route_slots, "COME_BACK", 2.0)
    monkeypatch.setattr(route_slots, "COME_BACK_MOST", 2.0)
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    Identity.objects.create(tenant=world.tenant_a, channel="telegram", external_id="41", user=world.alice,
                            approval="approved", trust_level="owner", display_name="Alice")
    Qor.objects.filter(pk=world.qor_a.pk).update(main_max_concurrency=1)
    answer = threading.Event()  # the woken turn's answer: held until the come-back has run
    model_server.default = reply("Woken.", hold=answer)
    try:
        with (route_slots.route_slot(base_url=model_server.base_url, cap=1, wait=5, lease=30),  # held elsewhere
              _task_runs("channels_app.inbound") as inbound_runs):
            post_telegram(client, telegram_update("hello?", user_id=41, message_id=41))
            # It waited in the task that stored it, which ended: its come-back is on the
            # timer. Not as soon as it is counted waiting: its call joins the queue, then
            # finds whether a slot is free (a slot freed in between is its at once).
            _until(lambda: inbound_runs == ["SUCCESS"])
            assert route_slots.route_slot_waiting(base_url=model_server.base_url) == 1
            assert turn_runs == []
        _until(lambda: model_server.in_flight == 1 and len(turn_runs) == 1)  # the slot taken; the come-back ran
        assert turn_runs == ["SUCCESS"]  # it ended, not waiting for the session
    finally:
        answer.set()
    drain()
    _until(lambda: len(turn_runs) == 2)  # noted after the worker counts it done
    assert turn_runs == ["SUCCESS", "SUCCESS"]
    answered = Message.objects.get(tenant=world.tenant_a, role="assistant")
    assert answered.content == "Woken."
    assert len(model_server.requests) == 1
    assert [r.json["text"] for r in platform.sent(r"bot111:AAA/sendMessage")] == ["Woken."]


def test_a_waiting_message_whose_conversation_is_cleared_gives_up_its_place_in_the_routes_queue(
    client, world, alice_token, model_server, drain, turn_runs
):
    """/clear while a message waits for a capped route's slot: the message is not answered,
    and its turn, coming back, follows the conversation to its fresh one. Its place at the
    head of the route's queue stayed until it lapsed (30 s), every later call to that
    server waiting behind it."""
    from qorven.runtime import route_slots

    with _waiting_for_a_slot_held_elsewhere(client, world, alice_token, model_server, turn_runs):
        ask(client, alice_token, "/clear")
        _until(lambda: len(turn_runs) == 2)  # it came back, and ended
        assert route_slots.route_slot_waiting(base_url=model_server.base_url) == 0
    drain()
    assert model_server.requests == []
    assert not Message.objects.filter(tenant=world.tenant_a, role="assistant", content="Never asked.").exists()


def _cache_reads_of(world, model_server, *, busy: int, task_id: str) -> list[str]:
    """The turn task run for a waiting message (`busy`: the tries it has made on a busy
    session), with the session's waiter marker naming `task_id`; the cache keys it read."""
    from django.core.cache import cache

    from qorven.agent.tasks import agent_turn
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    model_server.add(reply("Answered."))
    message_append(session=session, role="user", content="hi", channel="web", sender_name="Alice",
                   awaits_answer=True, notify=False, metadata={"trust": "owner"})
    cache.set(f"turn-waiter:{session.pk}", "the-waiter", 30)
    with _cache_keys_read() as read:
        assert agent_turn.apply(args=(world.tenant_a.pk, session.pk), kwargs={"busy": busy}, task_id=task_id).result == 1
    read.append(f"left:{cache.get(f'turn-waiter:{session.pk}')}")
    return read


@contextmanager
def _cache_keys_read() -> Iterator[list[str]]:
    """The keys read from the shared cache (django.core.cache.cache.get) meanwhile."""
    from django.core.cache import cache

    read: list[str] = []
    original = cache.get

    def get(key, *args, **kwargs):
        read.append(key.split(":")[0])
        return original(key, *args, **kwargs)

    cache.get = get
    try:
        yield read
    finally:
        del cache.get


def test_a_turn_task_that_waited_for_its_busy_session_stops_being_its_waiter_once_it_runs(world, model_server):
    """The task that waited for a held session (its retries count the tries) lets the next
    one that finds the session busy wait in its place."""
    assert _cache_reads_of(world, model_server, busy=2, task_id="the-waiter")[-1] == "left:None"


def test_a_turn_task_that_never_found_its_session_busy_asks_the_cache_nothing_about_waiting(world, model_server):
    """Only a task that found the session busy can be its waiter: one that never did reads
    no waiter marker (a cache round trip on every turn before) and leaves another's alone."""
    read = _cache_reads_of(world, model_server, busy=0, task_id="a-fresh-task")
    assert "turn-waiter" not in read
    assert read[-1] == "left:the-waiter"
