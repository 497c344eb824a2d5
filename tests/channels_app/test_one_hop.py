"""A platform message is answered by the task that stored it: no turn task of its own, one
broker hop less between the message and its answer, and the reply is sent to the platform
by that task too (no send task of its own). A session another turn holds is left to the
turn task, which waits for it as always; a send that cannot go now goes to the send task."""
from __future__ import annotations

import time

import pytest
from celery import signals
from celery.utils.nodenames import gethostname

from django.core.cache import cache

from django.utils import timezone

from channels_app.models import Identity, InboundEvent, OutboundDelivery
from heartbeats_app.models import DELIVER_REMINDERS
from heartbeats_app.services import heartbeat_create, heartbeat_run_now
from memory_app.services import reminder_add
from sessions_app.models import Message
from sessions_app.services import session_resolve
from sessions_app.turn_writes import turn_lease_acquire, turn_lease_release

from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from .conftest import pair
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def published():
    names: list[str] = []

    def record(sender=None, **kwargs):
        names.append(sender)

    signals.before_task_publish.connect(record, weak=False)
    yield names
    signals.before_task_publish.disconnect(record)


def until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_telegram_message_is_answered_by_the_task_that_stored_it(
    client, world, telegram, platform, model_server, drain, published
):
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Right away."))
    assert post_telegram(client, telegram_update("book the table")).status_code == 200
    drain()
    (sent,) = platform.sent(r"/telegram/bot111:AAA/sendMessage")
    assert sent.json["text"] == "Right away."
    assert "channels_app.inbound" in published
    assert "qorven.agent.turn" not in published
    assert "channels_app.deliver" not in published
    assert OutboundDelivery.objects.get().state == "sent"


def test_a_reply_whose_send_fails_for_now_goes_to_the_send_task_and_is_sent_once(
    client, world, telegram, platform, model_server, drain, published, settings
):
    settings.QORVEN_SEND_BACKOFF = 0.05
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Right away."))
    platform.script(r"sendMessage", Canned(status=502, body={"ok": False, "description": "Bad Gateway"}))
    assert post_telegram(client, telegram_update("book the table")).status_code == 200
    drain()
    assert [s.json["text"] for s in platform.sent(r"sendMessage")] == ["Right away.", "Right away."]
    assert published.count("channels_app.deliver") == 1  # the retry, after the backoff
    assert OutboundDelivery.objects.values_list("state", "attempts").get() == ("sent", 2)


def test_a_reply_finding_no_send_slot_goes_to_the_send_task(
    client, world, telegram, platform, model_server, drain, published, settings
):
    settings.QORVEN_SEND_SLOTS = 1
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Right away."))
    slot = f"send:worker:{gethostname()}:0"  # the one send slot of the embedded worker (its tasks' hostname)
    assert cache.add(slot, "taken", 60)
    assert post_telegram(client, telegram_update("book the table")).status_code == 200
    until(lambda: "channels_app.deliver" in published)
    assert not platform.sent(r"sendMessage")  # nothing went out while the worker had no slot
    cache.delete(slot)
    drain()
    (sent,) = platform.sent(r"/telegram/bot111:AAA/sendMessage")
    assert sent.json["text"] == "Right away."


def test_a_session_another_turn_holds_is_left_to_the_turn_task_and_answered_once_free(
    client, world, telegram, platform, model_server, drain, published
):
    pair(world, "telegram", "42", world.alice)
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    assert turn_lease_acquire(session_id=session.pk, owner="another-turn", seconds=300)
    model_server.add(reply("Done."))
    assert post_telegram(client, telegram_update("and the taxi")).status_code == 200
    until(lambda: InboundEvent.objects.filter(state=InboundEvent.State.DONE).exists())
    until(lambda: "qorven.agent.turn" in published)  # the stored message went on to the turn task
    assert not model_server.requests
    turn_lease_release(session_id=session.pk, owner="another-turn")
    drain()
    assert [m.content for m in Message.objects.filter(role="assistant")] == ["Done."]
    assert len(platform.sent("sendMessage")) == 1
    assert "channels_app.deliver" not in published  # the turn task sent its reply itself


def test_a_heartbeats_message_to_a_platform_is_sent_by_the_heartbeats_task(
    world, telegram, platform, drain, published
):
    Identity.objects.create(tenant=world.tenant_a, channel="telegram", external_id="42", user=world.alice,
                            approval=Identity.Approval.APPROVED, reply_target="42")
    reminder_add(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, content="take the cake out",
                 due=timezone.now(), channels=["telegram"])
    beat = heartbeat_create(tenant=world.tenant_a, qor=world.qor_a, name=DELIVER_REMINDERS, cron="*/5 * * * *",
                            managed=True, system=True)
    heartbeat_run_now(heartbeat=beat)
    drain()
    (sent,) = platform.sent(r"/telegram/bot111:AAA/sendMessage")
    assert sent.json["text"] == "Reminder: take the cake out"
    assert "heartbeats_app.run" in published
    assert "channels_app.deliver" not in published
