"""What a webhook stored, and for how long: an inbound event keeps the message only until
it is processed (the conversation has it from then on, and is what retention and erasure
act on); finished events go after QORVEN_INBOUND_RETENTION, and the parts of replies sent
to a platform after QORVEN_DELIVERY_RETENTION."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from channels_app.models import InboundEvent, OutboundDelivery
from channels_app.sweep import sweep
from sessions_app.models import Message
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

from ..fakes.model_server import reply
from .conftest import pair
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_processed_message_is_kept_in_the_conversation_not_in_its_event(client, world, telegram, platform,
                                                                           model_server, drain):
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Noted."))
    assert post_telegram(client, telegram_update("my IBAN is DE89 3704", message_id=5)).status_code == 200
    drain()
    event = InboundEvent.objects.get()
    assert event.state == "done" and "DE89" not in str(event.payload)
    assert Message.objects.filter(role="user", content="my IBAN is DE89 3704").exists()
    # Still recognised when the platform delivers it again: stored and answered once.
    assert post_telegram(client, telegram_update("my IBAN is DE89 3704", message_id=5)).status_code == 200
    drain()
    assert InboundEvent.objects.count() == 1 and Message.objects.filter(role="user").count() == 1


def test_an_unknown_senders_message_is_not_kept_once_answered_with_a_pairing_code(client, world, telegram, platform,
                                                                                   drain):
    assert post_telegram(client, telegram_update("hello, my number is 0170 555", message_id=6)).status_code == 200
    drain()
    event = InboundEvent.objects.get()
    assert event.result == "pairing-code" and "0170" not in str(event.payload)


def _event(world, binding, n: int, state: str, days_ago: int, tenant=None) -> InboundEvent:
    event = InboundEvent.objects.create(tenant=tenant or world.tenant_a, binding=binding, external_id=f"old:{n}",
                                        sender_id="42", payload={"text": f"message {n}"}, state=state)
    InboundEvent.objects.filter(pk=event.pk).update(created_at=timezone.now() - timedelta(days=days_ago))
    return event


def test_finished_events_older_than_the_retention_are_deleted_by_the_sweeper(world, telegram, settings):
    from channels_app.services import binding_create

    settings.QORVEN_INBOUND_RETENTION = "30d"
    theirs = binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="telegram",
                            credentials={"token": "222:BBB", "secret": "tg-secret-b", "username": "b_bot"})
    old_done = _event(world, telegram, 1, "done", 40)
    old_failed = _event(world, telegram, 2, "failed", 40)
    old_unfinished = _event(world, telegram, 3, "processing", 40)  # claimed by a task right now: left to it
    recent = _event(world, telegram, 4, "done", 10)
    other_tenant = _event(world, theirs, 5, "done", 40, tenant=world.tenant_b)
    sweep()
    kept = set(InboundEvent.objects.values_list("pk", flat=True))
    assert kept == {old_unfinished.pk, recent.pk}
    assert not {old_done.pk, old_failed.pk, other_tenant.pk} & kept


def test_a_retention_of_0_keeps_events(world, telegram, settings):
    settings.QORVEN_INBOUND_RETENTION = "0"
    old = _event(world, telegram, 1, "done", 4000)
    sweep()
    assert InboundEvent.objects.filter(pk=old.pk).exists()


def _part(world, binding, n: int, state: str, days_ago: int, tenant=None, qor=None, user=None) -> OutboundDelivery:
    session = session_resolve(tenant=tenant or world.tenant_a, qor=qor or world.qor_a, channel="web",
                              user=user or world.alice)
    message = message_append(session=session, role="assistant", content=f"reply {n}", channel="web",
                             notify=False).message
    then = timezone.now() - timedelta(days=days_ago)
    part = OutboundDelivery.objects.create(tenant=tenant or world.tenant_a, message=message, part=0, binding=binding,
                                           target="42", text=f"reply {n}", state=state,
                                           sent_at=then if state == "sent" else None)
    OutboundDelivery.objects.filter(pk=part.pk).update(updated_at=then)
    return part


def test_sent_reply_parts_older_than_the_retention_are_deleted_by_the_sweeper(world, telegram, settings):
    """Each part sent to a platform was kept for good, a second copy of the reply's text
    beside the message; once no retry can come, a sent part has nothing left to guard."""
    from channels_app.services import binding_create

    settings.QORVEN_DELIVERY_RETENTION = "30d"
    theirs = binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="telegram",
                            credentials={"token": "222:BBB", "secret": "tg-secret-b", "username": "b_bot"})
    old_sent = _part(world, telegram, 1, "sent", 40)
    old_failed = _part(world, telegram, 2, "failed", 40)  # the chat still says it was not delivered
    recent = _part(world, telegram, 4, "sent", 10)
    other_tenant = _part(world, theirs, 5, "sent", 40, tenant=world.tenant_b, qor=world.qor_b, user=world.charlie)
    sweep()
    kept = set(OutboundDelivery.objects.values_list("pk", flat=True))
    assert kept == {old_failed.pk, recent.pk}
    assert not {old_sent.pk, other_tenant.pk} & kept
    assert Message.objects.filter(pk=old_sent.message_id).exists()  # the reply itself stays


def test_a_delivery_retention_of_0_keeps_sent_parts(world, telegram, settings):
    settings.QORVEN_DELIVERY_RETENTION = "0"
    old = _part(world, telegram, 1, "sent", 4000)
    sweep()
    assert OutboundDelivery.objects.filter(pk=old.pk).exists()
