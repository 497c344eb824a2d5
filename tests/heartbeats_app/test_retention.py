"""Conversation retention: a tenant may have archived conversations deleted some days after
they ended (the reserved beat __qorven_retention__); what the Qor remembers stays."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from heartbeats_app.models import CONVERSATION_RETENTION
from qorven.agent.heartbeat_runs import run_heartbeat
from heartbeats_app.services import heartbeat_create
from memory_app.models import Memory
from sessions_app.models import Image, Message, Session
from sessions_app.retention import sessions_prune
from sessions_app.services.append import message_append
from sessions_app.services.lifecycle import session_rotate
from sessions_app.services.resolve import session_resolve

from ..sqlite_file import sqlite_file_bytes

pytestmark = pytest.mark.django_db

TICK = timezone.now().replace(second=0, microsecond=0)


def archived(world, tenant, qor, user, *, days_ago: int) -> Session:
    """A conversation with a message and an image, archived `days_ago` days ago."""
    chat = session_resolve(tenant=tenant, qor=qor, channel="web", user=user)
    message = message_append(session=chat, role="user", content=f"{days_ago} days ago", channel="web").message
    Image.objects.create(tenant=tenant, message=message, mime_type="image/png", data="aGk=", size=2)
    session_rotate(session=chat)
    Session.objects.filter(pk=chat.pk).update(ended_at=timezone.now() - timedelta(days=days_ago))
    return chat


def retention_run(tenant, qor):
    beat = heartbeat_create(tenant=tenant, qor=qor, name=CONVERSATION_RETENTION, cron="45 3 * * *", managed=True)
    return run_heartbeat(tenant_id=tenant.pk, heartbeat_id=beat.pk, tick=TICK)


def test_archived_conversations_past_the_retention_go_with_their_messages_and_images(world, model_server):
    world.tenant_a.conversation_retention_days = 30
    world.tenant_a.save()
    old = archived(world, world.tenant_a, world.qor_a, world.alice, days_ago=40)
    recent = archived(world, world.tenant_a, world.qor_a, world.alice, days_ago=10)
    remembered = Memory.objects.create(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, type="fact",
                                       content="Alice likes tea", content_hash="h1", source_session=old)
    active = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=active, role="user", content="still here", channel="web")
    Session.objects.filter(pk=active.pk).update(started_at=timezone.now() - timedelta(days=400))
    other = archived(world, world.tenant_b, world.qor_b, world.charlie, days_ago=400)

    result = retention_run(world.tenant_a, world.qor_a)

    assert (result.status, result.output) == ("ok", "Deleted 1 archived conversation(s) (1 message(s), "
                                                    "1 attachment(s)) that ended more than 30 days ago.")
    assert not Session.objects.filter(pk=old.pk).exists()
    assert not Message.objects.filter(session_id=old.pk).exists()
    assert set(Session.objects.filter(tenant=world.tenant_a).values_list("pk", flat=True)) == {recent.pk, active.pk}
    assert Image.objects.filter(tenant=world.tenant_a).count() == 1  # the recent conversation's
    remembered.refresh_from_db()
    assert remembered.content == "Alice likes tea" and remembered.source_session is None
    assert Session.objects.filter(pk=other.pk).exists()  # another tenant's, however old
    assert model_server.requests == []


def test_without_a_retention_nothing_is_deleted(world, model_server):
    old = archived(world, world.tenant_a, world.qor_a, world.alice, days_ago=4000)
    result = retention_run(world.tenant_a, world.qor_a)
    assert result.output == "Conversations are kept (no retention set for this workspace)."
    assert Session.objects.filter(pk=old.pk).exists() and Message.objects.filter(session=old).exists()


@pytest.mark.django_db(transaction=True)
def test_the_words_of_expired_conversations_leave_the_database_file(world):
    if connection.vendor != "sqlite":
        pytest.skip("the embedded default's file")
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=chat, role="user", content="the Griffondale deal closes Friday", channel="web")
    session_rotate(session=chat)
    Session.objects.filter(pk=chat.pk).update(ended_at=timezone.now() - timedelta(days=40))
    kept = session_resolve(tenant=world.tenant_b, qor=world.qor_b, channel="web", user=world.charlie)
    message_append(session=kept, role="user", content="Zephyrtonk stays", channel="web")
    assert b"riffonda" in sqlite_file_bytes()

    assert sessions_prune(tenant=world.tenant_a, ended_before=timezone.now() - timedelta(days=30))["messages"] == 1

    after = sqlite_file_bytes()
    left = after.count(b"riffonda")  # the search index's stemmed word included
    assert left == 0 and b"ephyrton" in after
