"""Turns waiting for a slot of a capped route (a Qor's `max_concurrency`): a freed slot
goes to the next waiting message at once, and a message coming back for a slot still
taken reads nothing for its prompt. (The queue itself: tests/qorven/test_route_slot_queue.py.)"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory_app.models import Memory
from qorven.agent.turns import turn_process
from qorven.runtime import route_slots
from sessions_app.models import Message
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.models import Qor
from tenancy.services import api_token_create

from ..factories.tenancy import MembershipFactory, UserFactory
from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db(transaction=True)
# Seconds a wait here may last: what only a hang reaches. Under a load of 10 on 2 cores a
# turn took more than the 8 s a wait had, and the test failed with nothing wrong.
HANG = 120.0


def _ask(client, tenant, user, content):
    token = api_token_create(tenant=tenant, user=user)[1]
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": content}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201, response.content


def _until(condition, seconds=HANG):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.02)


def _far_come_back(monkeypatch, seconds):
    """A waiting turn's task comes back on the worker's timer `seconds` after its look."""
    monkeypatch.setattr(route_slots, "COME_BACK", seconds)
    monkeypatch.setattr(route_slots, "COME_BACK_MOST", seconds)


@contextmanager
def _as_come_backs_start(note: Callable[[], object]) -> Iterator[list[object]]:
    """What `note()` says as each turn's come-back on the worker's timer starts (Celery's
    own signal), in order."""
    from celery import signals

    seen: list[object] = []

    def started(task=None, kwargs=None, **_) -> None:
        if getattr(task, "name", "") == "qorven.agent.turn" and (kwargs or {}).get("back"):
            seen.append(note())

    signals.task_prerun.connect(started, weak=False)
    try:
        yield seen
    finally:
        signals.task_prerun.disconnect(started)


def test_a_freed_slot_goes_to_the_message_waiting_for_it_at_once_not_when_its_task_comes_back(
    client, world, model_server, drain, monkeypatch
):
    """Tenant A's route takes one call at once. Bob's message waits for the slot Alice's
    call holds; as Alice's answer ends, Bob's call starts, without waiting for his task to
    come back on the worker's timer (set here past what the test waits for it: before,
    the slot stayed free until then, 0.5 to 3 s with the default timer). Each message is
    asked of the model once and answered once, however many times its task comes."""
    _far_come_back(monkeypatch, 12.0)
    Qor.objects.filter(pk=world.qor_a.pk).update(main_max_concurrency=1)
    alices = threading.Event()
    model_server.add(reply("For Alice.", hold=alices), reply("For Bob."))
    with _as_come_backs_start(lambda: len(model_server.requests)) as asked_by_then:
        _ask(client, world.tenant_a, world.alice, "first")
        _until(lambda: model_server.in_flight == 1)
        _ask(client, world.tenant_a, world.bob, "second")
        _until(lambda: route_slots.route_slot_waiting(base_url=model_server.base_url) == 1)
        assert len(model_server.requests) == 1

        alices.set()
        bobs = Message.objects.filter(tenant=world.tenant_a, role="assistant", content="For Bob.")
        _until(bobs.exists)
        drain()  # his task's own come-back too, which finds him answered
    # Bob's call had come when his task came back on its timer (12 s after his look): the
    # slot's release sent it. Told by the order, not by a time a loaded machine stretches.
    assert asked_by_then == [2]
    # Two people's chats: which answer is stored first is a race the product does not order
    # (the slot is freed as Alice's call ends, before her answer's row is written).
    answers = Message.objects.filter(tenant=world.tenant_a, role="assistant")
    assert sorted(m.content for m in answers) == ["For Alice.", "For Bob."]
    assert len(model_server.requests) == 2
    assert Message.objects.filter(tenant=world.tenant_a, role="user", answer_state="answered").count() == 2
    assert route_slots.route_slot_waiting(base_url=model_server.base_url) == 0


def test_a_message_coming_back_for_a_slot_still_taken_reads_nothing_for_its_prompt(world, model_server, drain):
    """Each come-back of a waiting turn built the whole prompt first (the person's
    memories searched, the conversation's window read) only to find the slot still
    taken; now it looks at the slot first."""
    Qor.objects.filter(pk=world.qor_a.pk).update(main_max_concurrency=1)
    Memory.objects.create(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, content="Likes tea.")
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="user", content="tea?", channel="web", sender_name="Alice",
                   awaits_answer=True, notify=False, metadata={"trust": "owner"})
    model_server.default = reply("Tea it is.")
    with route_slots.route_slot(base_url=model_server.base_url, cap=1, wait=5, lease=30):  # held elsewhere
        assert turn_process(tenant_id=world.tenant_a.pk, session_id=session.pk).retry_after is not None
        with CaptureQueriesContext(connection) as come_back:
            outcome = turn_process(tenant_id=world.tenant_a.pk, session_id=session.pk)
        assert outcome.retry_after is not None and outcome.answered == 0
    queries = [q["sql"] for q in come_back.captured_queries]
    # No memory search (the message's read looks whether the person has any memory: memories_held).
    assert not [q for q in queries if "memory_app_memory" in q and "sessions_app_message" not in q]
    # The message to answer is read; its conversation's window is not.
    assert len([q for q in queries if q.startswith("SELECT") and "sessions_app_message" in q]) == 1, queries
    assert len(queries) == 3, queries  # the session's lease taken, the message (with its tool switches), the lease let go
    drain()
    assert Message.objects.get(session=session, role="assistant").content == "Tea it is."


def test_a_message_whose_turn_comes_twice_for_its_slot_is_answered_once_and_its_reply_sent_once(
    client, world, model_server, platform, drain
):
    """A waiting message's turn comes twice: sent as a slot frees for it, and back on its
    own timer (here at about the same time). A turn answers only what is still unanswered,
    one turn at a time per conversation: each message is asked of the model once, and
    each reply reaches its Telegram chat once. Three people, each in a conversation of
    their own."""
    from channels_app.models import Identity
    from channels_app.services import binding_create

    from ..channels_app.payloads import post_telegram, telegram_update

    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    Qor.objects.filter(pk=world.qor_a.pk).update(main_max_concurrency=1)
    first = threading.Event()
    model_server.add(reply("Answer one.", hold=first), reply("Answer two."), reply("Answer three."))
    dora = UserFactory(username="dora", first_name="Dora")
    MembershipFactory(tenant=world.tenant_a, user=dora)
    for n, (sender, person) in enumerate(zip([41, 42, 43], [world.alice, world.bob, dora], strict=True)):
        Identity.objects.create(tenant=world.tenant_a, channel="telegram", external_id=str(sender), user=person,
                                approval="approved", trust_level="owner", display_name=person.first_name)
        post_telegram(client, telegram_update(f"question {n}", user_id=sender, message_id=sender))
        # Each in the queue before the next comes: they are answered in that order.
        _until(lambda: model_server.in_flight == 1
               and route_slots.route_slot_waiting(base_url=model_server.base_url) == n)
    first.set()
    drain()
    assert len(model_server.requests) == 3
    answers = Message.objects.filter(tenant=world.tenant_a, role="assistant")
    assert sorted(m.content for m in answers) == ["Answer one.", "Answer three.", "Answer two."]
    sent = platform.sent(r"bot111:AAA/sendMessage")
    assert sorted((r.json["chat_id"], r.json["text"]) for r in sent) == [
        ("41", "Answer one."), ("42", "Answer two."), ("43", "Answer three.")]


def _asked_in_order(model_server) -> list[str]:
    """What each call to the model server asked, in the order the calls came: the last
    message of each (its sender's name and time before the ": ")."""
    asked: list[str] = []

    def model(body):
        asked.append(body["messages"][-1]["content"].rsplit(": ", 1)[-1])
        return reply("In turn.")

    model_server.default = model
    return asked


def test_a_freed_slot_goes_to_each_workspace_in_turn_not_to_the_one_that_queued_most(
    client, world, model_server, drain
):
    """The route is the host's, shared by both workspaces, and takes one call at once,
    held elsewhere. Three people of workspace A ask, then Charlie of workspace B: as the
    slot frees, Charlie's message is asked second, between A's first and A's second.
    Before, one first-come queue for every workspace asked it after all of A's: with 30 of
    A's messages on a server answering in ~10 s, it waited past QORVEN_MODEL_DEADLINE and
    failed as "model unavailable" while A's burst was served."""
    for qor in (world.qor_a, world.qor_b):
        Qor.objects.filter(pk=qor.pk).update(main_max_concurrency=1)
    asked = _asked_in_order(model_server)
    dora = UserFactory(username="dora", first_name="Dora")
    MembershipFactory(tenant=world.tenant_a, user=dora)
    people = [(world.tenant_a, world.alice), (world.tenant_a, world.bob), (world.tenant_a, dora),
              (world.tenant_b, world.charlie)]
    with route_slots.route_slot(base_url=model_server.base_url, cap=1, wait=5, lease=30):  # held elsewhere
        for n, (tenant, person) in enumerate(people, start=1):
            _ask(client, tenant, person, f"question {n}")
            _until(lambda: route_slots.route_slot_waiting(base_url=model_server.base_url) == n)  # noqa: B023
    drain()
    assert asked == ["question 1", "question 4", "question 2", "question 3"]
    assert Message.objects.filter(role="assistant", content="In turn.").count() == 4
    assert Message.objects.get(tenant=world.tenant_b, role="assistant").content == "In turn."


def test_a_heartbeat_waiting_for_the_slot_on_its_thread_takes_its_workspaces_turn(
    client, world, model_server, drain, monkeypatch
):
    """Workspace B's heartbeat run waits for the shared route's one slot on its thread,
    behind three messages of workspace A: it is asked second, after A's first, not after
    all of A's (before: last, or failed as busy once its 8 s were up)."""
    from qorven.agent.heartbeat_runs import run_heartbeat

    from ..factories.heartbeats_app import beat

    # Its wait on the thread (THREAD_WAIT, 8 s) lasts through A's first turn, which a loaded
    # machine stretches past it: what is proved here is the order, so only a hang ends it.
    monkeypatch.setattr(route_slots, "THREAD_WAIT", HANG)

    Qor.objects.filter(pk=world.qor_a.pk).update(main_max_concurrency=1)
    Qor.objects.filter(pk=world.qor_b.pk).update(heartbeat_max_concurrency=1)
    world.qor_b.refresh_from_db()
    hb = beat(world.qor_b, name="standup", prompt="the standup reminder", owner=world.charlie,
              deliver_to=world.charlie, deliver_channel="web")
    asked = _asked_in_order(model_server)
    dora = UserFactory(username="dora", first_name="Dora")
    MembershipFactory(tenant=world.tenant_a, user=dora)
    runs: list[str] = []
    with route_slots.route_slot(base_url=model_server.base_url, cap=1, wait=5, lease=30):  # held elsewhere
        for n, person in enumerate([world.alice, world.bob, dora], start=1):
            _ask(client, world.tenant_a, person, f"question {n}")
            _until(lambda: route_slots.route_slot_waiting(base_url=model_server.base_url) == n)  # noqa: B023

        def heartbeat_run() -> None:
            try:
                runs.append(run_heartbeat(tenant_id=hb.tenant_id, heartbeat_id=hb.pk, tick=timezone.now()).status)
            finally:
                connection.close()

        running = threading.Thread(target=heartbeat_run)
        running.start()
        _until(lambda: route_slots.route_slot_waiting(base_url=model_server.base_url) == 4)
    running.join(HANG)
    drain()
    assert runs == ["ok"]
    assert asked == ["question 1", "the standup reminder", "question 2", "question 3"]
