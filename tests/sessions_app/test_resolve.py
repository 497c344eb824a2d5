from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve


def say(session, channel, text, sender="Alice"):
    return message_append(session=session, role="user", content=text, channel=channel, sender_name=sender).message


def test_telegram_web_and_whatsapp_from_one_user_share_the_canonical_session(world):
    sessions = [
        session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel=ch, user=world.alice, sender_id="42")
        for ch in ("telegram", "web", "whatsapp")
    ]
    assert len({s.pk for s in sessions}) == 1
    session = sessions[0]
    assert session.kind == Session.Kind.CANONICAL
    for ch in ("telegram", "web", "whatsapp"):
        say(session, ch, f"hello from {ch}")
    stored = list(Message.objects.filter(session=session).values_list("seq", "channel", "content"))
    assert stored == [
        (1, "telegram", "hello from telegram"),
        (2, "web", "hello from web"),
        (3, "whatsapp", "hello from whatsapp"),
    ]


def test_group_and_email_get_their_own_sessions(world):
    canonical = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    group = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", thread_id="-100123", group=True)
    email = session_resolve(
        tenant=world.tenant_a, qor=world.qor_a, channel="email", user=world.alice, thread_id="<thread-1@example.com>"
    )
    other_thread = session_resolve(
        tenant=world.tenant_a, qor=world.qor_a, channel="email", user=world.alice, thread_id="<thread-2@example.com>"
    )
    assert len({canonical.pk, group.pk, email.pk, other_thread.pk}) == 4
    assert (group.kind, group.channel, group.external_thread_id) == ("group", "telegram", "-100123")
    assert group.user is None
    assert (email.kind, email.channel) == ("email", "email")
    # Resolving again finds the same rows.
    again = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", thread_id="-100123", group=True)
    assert again.pk == group.pk


def test_other_users_and_other_tenants_get_other_canonical_sessions(world):
    alice = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    bob = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.bob)
    charlie = session_resolve(tenant=world.tenant_b, qor=world.qor_b, channel="web", user=world.charlie)
    assert len({alice.pk, bob.pk, charlie.pk}) == 3
    assert charlie.tenant == world.tenant_b


def test_a_qor_of_another_tenant_is_refused(world):
    with pytest.raises(ValueError):
        session_resolve(tenant=world.tenant_a, qor=world.qor_b, channel="web", user=world.alice)


def test_legacy_mode_gives_one_session_per_channel_and_sender(world, settings):
    settings.QORVEN_LEGACY_SESSIONS = True
    telegram = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice, sender_id="42")
    whatsapp = session_resolve(
        tenant=world.tenant_a, qor=world.qor_a, channel="whatsapp", user=world.alice, sender_id="+15550100"
    )
    web = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    assert len({telegram.pk, whatsapp.pk, web.pk}) == 3
    assert {s.kind for s in (telegram, whatsapp, web)} == {"legacy"}
    assert session_resolve(
        tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice, sender_id="42"
    ).pk == telegram.pk


def test_unknown_channel_is_an_error(world):
    with pytest.raises(ValueError):
        session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="carrier-pigeon", user=world.alice)


def test_database_allows_one_active_canonical_session_per_user(world):
    first = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    with pytest.raises(IntegrityError), transaction.atomic():
        Session.objects.create(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, kind="canonical")
    # Once archived, a new active one is allowed: still exactly one active.
    first.state = Session.State.ARCHIVED
    first.save(update_fields=["state"])
    Session.objects.create(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, kind="canonical")
    active = Session.objects.filter(user=world.alice, kind="canonical", state="active")
    assert active.count() == 1


def test_database_refuses_a_canonical_session_without_user(world):
    with pytest.raises(IntegrityError), transaction.atomic():
        Session.objects.create(tenant=world.tenant_a, qor=world.qor_a, user=None, kind="canonical")


def test_a_persons_first_message_looks_for_their_chat_once_before_creating_it(world):
    """The chat is looked for, not found, and created: not looked for a second time."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ran:
        session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    reads = [q["sql"] for q in ran.captured_queries
             if q["sql"].lstrip().upper().startswith("SELECT") and "sessions_app_session" in q["sql"]]
    assert len(reads) == 1, reads
    assert Session.objects.get(pk=session.pk).kind == Session.Kind.CANONICAL
    assert session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice) == session


def test_a_thread_two_members_write_in_is_a_session_of_each(world):
    """An email thread (an sms number, a call) is a person's own session: another member
    naming the same thread — replying to it, or guessing its id — gets a session of their
    own, never hers (with her messages, memories and tools in their turn)."""
    for channel in ("email", "sms", "voice"):
        hers = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel=channel, user=world.alice,
                               thread_id="<a1@acme.example>")
        his = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel=channel, user=world.bob,
                              thread_id="<a1@acme.example>")
        assert hers.pk != his.pk and (hers.user, his.user) == (world.alice, world.bob)
        assert session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel=channel, user=world.alice,
                               thread_id="<a1@acme.example>").pk == hers.pk


def test_database_allows_one_active_session_per_person_and_thread_and_one_per_group(world):
    session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="email", user=world.alice, thread_id="t-1")
    with pytest.raises(IntegrityError), transaction.atomic():
        Session.objects.create(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, kind="email",
                               channel="email", external_thread_id="t-1")
    session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", thread_id="-100", group=True)
    with pytest.raises(IntegrityError), transaction.atomic():
        Session.objects.create(tenant=world.tenant_a, qor=world.qor_a, kind="group", channel="telegram",
                               external_thread_id="-100")
