"""One tenant's trouble stays with that tenant: while A's platform hangs, A's session is
held by a turn that died, or A's model takes ten seconds, tenant B is answered as usual
(before A's trouble is over)."""
from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from channels_app.models import OutboundDelivery
from qorven.services import api_token_create
from sessions_app.models import Message, Session
from sessions_app.services import session_resolve

from ..fakes.model_server import Step, reply
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
    assert OutboundDelivery.objects.get(tenant=world.tenant_a).state == "failed"  # it timed out, for good


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


def test_b_is_answered_while_as_model_takes_ten_seconds(client, world, model_server, drain):
    def slow_for_alice(body):
        return Step(text="Slowly.", delay=10) if "Alice" in json.dumps(body) else reply("Quickly.")

    model_server.default = slow_for_alice
    ask(client, world, world.tenant_a, world.alice, "think hard")
    assert wait_for(lambda: len(model_server.requests) == 1)  # A's model is busy now
    ask(client, world, world.tenant_b, world.charlie, "quick one")
    assert wait_for(lambda: answered(world.tenant_b))
    assert not answered(world.tenant_a)  # still thinking
    drain()
    assert [m.content for m in Message.objects.filter(role="assistant").order_by("created_at")] == [
        "Quickly.", "Slowly."
    ]
