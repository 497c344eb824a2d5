"""The reminders system beat: due reminders reach the user's chat, and the platform they
were made on, once, with no model call."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from channels_app.models import Identity
from channels_app.services import binding_create
from heartbeats_app.models import DELIVER_REMINDERS
from qorven.agent.heartbeat_runs import run_heartbeat
from heartbeats_app.services import heartbeat_create
from memory_app.models import Memory
from memory_app.services import reminder_add
from sessions_app.models import Message
from tenancy.trust import Trust

pytestmark = pytest.mark.django_db(transaction=True)


def system_beat(tenant, qor):
    return heartbeat_create(tenant=tenant, qor=qor, name=DELIVER_REMINDERS, cron="*/5 * * * *", managed=True,
                            system=True)


def run(hb):
    return run_heartbeat(tenant_id=hb.tenant_id, heartbeat_id=hb.pk, manual=True)


def reminder(tenant, qor, user, content, due, channels=()):
    return reminder_add(tenant=tenant, qor=qor, user=user, content=content, due=due, channels=channels)[0]


def assistant_messages(user):
    return list(Message.objects.filter(session__user=user, role="assistant").order_by("seq")
                .values_list("channel", "content"))


def test_due_reminders_reach_the_chat_once_and_the_rest_wait(world, model_server):
    now = timezone.now()
    call = reminder(world.tenant_a, world.qor_a, world.alice, "call mum", now - timedelta(minutes=3), ["whatsapp"])
    later = reminder(world.tenant_a, world.qor_a, world.alice, "pay rent", now + timedelta(days=2))
    bobs = reminder(world.tenant_a, world.qor_a, world.bob, "water the plants", now - timedelta(hours=1), ["email"])
    theirs = reminder(world.tenant_b, world.qor_b, world.charlie, "globex standup", now - timedelta(minutes=1))
    beat = system_beat(world.tenant_a, world.qor_a)

    first = run(beat)

    assert (first.status, first.output) == ("ok", "Delivered 2 reminder(s).")
    assert assistant_messages(world.alice) == [("whatsapp", "Reminder: call mum")]
    assert assistant_messages(world.bob) == [("web", "Reminder: water the plants")]  # made by email: the web chat
    assert not assistant_messages(world.charlie)  # another tenant's beat delivers those
    assert model_server.requests == []
    done = {m.pk: m.period_end for m in Memory.objects.filter(pk__in=[call.pk, later.pk, bobs.pk, theirs.pk])}
    assert done[call.pk] is not None and done[bobs.pk] is not None
    assert done[later.pk] is None and done[theirs.pk] is None

    second = run(beat)
    assert second.output == "Delivered 0 reminder(s)."
    assert assistant_messages(world.alice) == [("whatsapp", "Reminder: call mum")]


def test_a_due_reminder_is_sent_to_the_platform_it_was_made_on(world, platform, drain):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    Identity.objects.create(tenant=world.tenant_a, channel="telegram", external_id="42", user=world.alice,
                            approval=Identity.Approval.APPROVED, trust_level=Trust.OWNER, reply_target="42")
    reminder(world.tenant_a, world.qor_a, world.alice, "take the cake out", timezone.now(), ["telegram"])

    run(system_beat(world.tenant_a, world.qor_a))
    drain()

    (sent,) = platform.sent(r"/telegram/bot111:AAA/sendMessage")
    assert sent.json == {"chat_id": "42", "text": "Reminder: take the cake out", "parse_mode": "HTML"}


def test_a_reminder_of_someone_who_left_the_workspace_is_not_delivered(world, model_server):
    """The Qor of a workspace never writes to someone no longer in it (as a user's beat
    does not deliver to one): their reminder stays, undelivered."""
    from tenancy.models import Membership

    bobs = reminder(world.tenant_a, world.qor_a, world.bob, "renew the acme contract", timezone.now())
    Membership.objects.filter(tenant=world.tenant_a, user=world.bob).delete()
    assert run(system_beat(world.tenant_a, world.qor_a)).output == "Delivered 0 reminder(s)."
    assert not assistant_messages(world.bob)
    assert Memory.objects.get(pk=bobs.pk).period_end is None


def test_a_reminder_of_someone_deactivated_is_not_delivered(world, platform, drain):
    """A deactivated account keeps its membership row but has left all the same: their
    reminder must not reach their Telegram (it did: only a deleted membership held it back)."""
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    Identity.objects.create(tenant=world.tenant_a, channel="telegram", external_id="43", user=world.bob,
                            approval=Identity.Approval.APPROVED, trust_level=Trust.OWNER, reply_target="43")
    bobs = reminder(world.tenant_a, world.qor_a, world.bob, "renew the acme contract", timezone.now(), ["telegram"])
    world.bob.is_active = False
    world.bob.save()

    assert run(system_beat(world.tenant_a, world.qor_a)).output == "Delivered 0 reminder(s)."
    drain()

    assert platform.sent(r"/telegram/bot111:AAA/sendMessage") == []
    assert not assistant_messages(world.bob)
    assert Memory.objects.get(pk=bobs.pk).period_end is None
