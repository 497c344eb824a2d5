"""One tenant's trouble stays with that tenant: while A's platform hangs, A's session is
held by a turn that died, or A's model is still thinking, tenant B is answered as usual
(before A's trouble is over)."""
from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from channels_app.models import Identity, OutboundDelivery
from channels_app.services import binding_create
from sessions_app.models import Message, Session
from sessions_app.services.resolve import session_resolve
from tenancy.services import api_token_create

from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from .conftest import pair
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(predicate, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def ask(client, world, tenant, user, content):
    token = api_token_create(tenant=tenant, user=user)[1]
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": content}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201
    return response.json()["message"]


def answered(tenant) -> bool:
    return Message.objects.filter(tenant=tenant, role="assistant").exists()


def test_b_is_answered_while_as_platform_hangs(client, world, telegram, platform, model_server, drain, settings):
    settings.QORVEN_PLATFORM_TIMEOUT = 4.0
    settings.QORVEN_SEND_RETRIES = 0
    pair(world, "telegram", "42", world.alice)
    platform.default(r"sendMessage", Canned(delay=60))  # accepts the request, never answers in time
    model_server.default = reply("Hello.")
    post_telegram(client, telegram_update("hi"))
    assert wait_for(lambda: platform.sent("sendMessage"))  # A's send is stuck now

    ask(client, world, world.tenant_b, world.charlie, "anyone there?")
    assert wait_for(lambda: answered(world.tenant_b))
    assert OutboundDelivery.objects.get(tenant=world.tenant_a).state == "sending"  # still stuck
    drain()
    # It timed out, for good; so did our notice that it may not have got there.
    assert sorted(OutboundDelivery.objects.filter(tenant=world.tenant_a).values_list("message__role", "state")) == [
        ("assistant", "failed"), ("system", "failed")]


def test_a_hanging_platform_holds_one_send_at_a_time_and_nobody_else_waits(
    client, world, telegram, platform, model_server, drain, settings
):
    """More of A's replies are stuck than the worker has slots: A's platform gets one
    send at a time, B's turns and B's own Telegram replies go on as usual, and each of A's
    parts is tried and ends failed."""
    settings.QORVEN_PLATFORM_TIMEOUT = 2.0
    settings.QORVEN_SEND_RETRIES = 0
    binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="telegram",
                   credentials={"token": "222:BBB", "secret": "tg-secret-b", "username": "globex_bot"})
    Identity.objects.create(tenant=world.tenant_b, channel="telegram", external_id="77", user=world.charlie,
                            approval="approved", trust_level="owner", display_name="Charlie")
    platform.default(r"bot111:AAA/sendMessage", Canned(delay=60))  # A's: accepts, never answers in time
    model_server.default = reply("Hello.")
    senders = [41, 42, 43, 44, 45, 46]  # more than QORVEN_WORKER_CONCURRENCY
    for user_id in senders:
        pair(world, "telegram", str(user_id), world.alice)
        post_telegram(client, telegram_update("hi", user_id=user_id, message_id=user_id))
    assert wait_for(lambda: Message.objects.filter(tenant=world.tenant_a, role="assistant").count() == len(senders))
    assert wait_for(lambda: platform.sent("bot111:AAA/sendMessage"))

    ask(client, world, world.tenant_b, world.charlie, "anyone there?")
    post_telegram(client, telegram_update("and here?", user_id=77, message_id=1), secret="tg-secret-b")
    assert wait_for(lambda: answered(world.tenant_b), 5)
    assert wait_for(lambda: platform.sent("bot222:BBB/sendMessage"), 5)
    assert len(platform.sent("bot111:AAA/sendMessage")) == 1  # the others wait for that one

    drain()
    # Each reply, then our notice to its chat that it may not have got there: each tried once.
    a_parts = OutboundDelivery.objects.filter(tenant=world.tenant_a)
    assert sorted(a_parts.values_list("message__role", "state", "attempts")) == (
        [("assistant", "failed", 1)] * len(senders) + [("system", "failed", 1)] * len(senders))
    assert sorted(a_parts.values_list("target", flat=True)) == sorted([str(s) for s in senders] * 2)
    assert len(platform.sent("bot111:AAA/sendMessage")) == 2 * len(senders)
    assert OutboundDelivery.objects.get(tenant=world.tenant_b).state == "sent"


def test_b_is_answered_while_a_dead_turn_still_holds_as_session(client, world, model_server, drain):
    model_server.default = reply("Hello.")
    session_a = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    Session.objects.filter(pk=session_a.pk).update(
        turn_owner="a-turn-that-died", turn_lease_until=timezone.now() + timedelta(seconds=40)
    )
    mine = ask(client, world, world.tenant_a, world.alice, "hello?")
    ask(client, world, world.tenant_b, world.charlie, "anyone there?")
    assert wait_for(lambda: answered(world.tenant_b))
    assert not answered(world.tenant_a)  # A's session is still held

    # The dead turn's lease runs out (here: now) and A's message is answered once.
    Session.objects.filter(pk=session_a.pk).update(turn_lease_until=timezone.now() - timedelta(seconds=1))
    drain()
    replies = Message.objects.filter(tenant=world.tenant_a, role="assistant")
    assert [(m.content, m.metadata["reply_to"]) for m in replies] == [("Hello.", mine["seq"])]


def test_b_is_answered_while_as_model_is_still_thinking(client, world, model_server, drain):
    """A's model answers only once the test lets it, after B is answered: had B's turn
    waited behind A's, B would never be answered while A's call is held."""
    alices = threading.Event()

    def slow_for_alice(body):
        return reply("Slowly.", hold=alices) if "Alice" in json.dumps(body) else reply("Quickly.")

    model_server.default = slow_for_alice
    ask(client, world, world.tenant_a, world.alice, "think hard")
    assert wait_for(lambda: model_server.in_flight == 1)  # A's model is busy now
    ask(client, world, world.tenant_b, world.charlie, "quick one")
    assert wait_for(lambda: answered(world.tenant_b), 30)
    assert model_server.in_flight == 1 and not answered(world.tenant_a)  # still thinking
    alices.set()
    drain()
    assert [m.content for m in Message.objects.filter(role="assistant").order_by("created_at")] == [
        "Quickly.", "Slowly."
    ]


def test_one_task_waits_for_a_held_session_however_many_messages_arrive(client, world, model_server, drain):
    """Ten messages while a dead turn holds the session: one task comes back to look,
    the other nine leave their message to it, and one turn answers all ten in order."""
    from celery import signals

    runs = []

    def count(sender=None, **kwargs):
        if sender is not None and sender.name == "qorven.agent.turn":
            runs.append(time.monotonic())

    signals.task_prerun.connect(count, weak=False)
    try:
        model_server.default = reply("Hello.")
        session_a = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
        Session.objects.filter(pk=session_a.pk).update(
            turn_owner="a-turn-that-died", turn_lease_until=timezone.now() + timedelta(seconds=40)
        )
        asked = [ask(client, world, world.tenant_a, world.alice, f"question {n}")["seq"] for n in range(10)]
        time.sleep(4)  # the waiting task's retries: after 0.5, 1 and 2 s
        assert 10 <= len(runs) <= 10 + 4  # each message's task once, then one waiter's retries
        Session.objects.filter(pk=session_a.pk).update(turn_lease_until=timezone.now() - timedelta(seconds=1))
        drain()
    finally:
        signals.task_prerun.disconnect(count)
    replies = Message.objects.filter(tenant=world.tenant_a, role="assistant").order_by("seq")
    assert [m.metadata["reply_to"] for m in replies] == asked
