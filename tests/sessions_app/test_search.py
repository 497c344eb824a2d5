"""History search: a person finds what they and their Qor said, in the conversation going
on and in the archived ones, with the database's full-text search — never anyone else's."""
from __future__ import annotations

import pytest
from django.core import checks
from django.db import connection

from sessions_app.models import Message, Session
from sessions_app.search import conversation_search, message_search
from sessions_app.services.append import message_append
from sessions_app.services.lifecycle import session_rotate
from sessions_app.services.resolve import session_resolve
from tests.factories.tenancy import QorFactory


def chat(world, user=None, qor=None, channel="web"):
    return session_resolve(tenant=world.tenant_a, qor=qor or world.qor_a, channel=channel, user=user or world.alice)


def say(session, content, role="user", **kw):
    return message_append(session=session, role=role, content=content, channel=kw.pop("channel", "web"),
                          notify=False, **kw).message


def found(world, query, user=None, qor=None):
    return [(h.seq, h.content) for h in message_search(
        tenant=world.tenant_a, qor=qor or world.qor_a, user=user or world.alice, query=query)]


def test_every_word_must_occur_stemmed_newest_first_across_archived_and_active_conversations(world):
    old = chat(world)
    say(old, "The lease on the flat ends in March")
    say(old, "Noted: your lease ends in March.", role="assistant")
    session_rotate(session=old)  # /clear: archived
    now = chat(world)
    say(now, "Remind me about the leases tomorrow", channel="telegram")
    say(now, "March is busy")

    hits = message_search(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="leases")
    assert [(h.session_id, h.seq, h.active) for h in hits] == [(now.pk, 1, True), (old.pk, 2, False), (old.pk, 1, False)]
    assert hits[0].channel == "telegram"
    assert found(world, "lease march") == [(2, "Noted: your lease ends in March."), (1, "The lease on the flat ends in March")]
    assert found(world, "the") == []  # stop words alone find nothing
    assert found(world, "flat tomorrow") == []


def test_search_never_crosses_people_qors_tenants_or_other_kinds_of_session(world):
    say(chat(world), "my passport number is in the drawer")
    say(chat(world, user=world.bob), "passport renewal for bob")
    other_qor = QorFactory(tenant=world.tenant_a, slug="scribe", is_default=False)
    say(chat(world, qor=other_qor), "passport photo booth")
    say(session_resolve(tenant=world.tenant_b, qor=world.qor_b, channel="web", user=world.charlie),
        "charlie's passport")
    email = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="email", thread_id="t-1",
                            user=world.alice)
    say(email, "passport scan attached", channel="email")  # her email thread: its own session
    group = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", thread_id="-100", group=True)
    say(group, "passport chatter in a group", channel="telegram")

    assert found(world, "passport") == [(1, "my passport number is in the drawer")]
    assert found(world, "passport", user=world.bob) == [(1, "passport renewal for bob")]
    assert found(world, "passport", qor=other_qor) == [(1, "passport photo booth")]
    assert message_search(tenant=world.tenant_a, qor=world.qor_b, user=world.charlie, query="passport") == []


def test_tool_rows_notices_commands_and_replaced_answers_are_not_found(world):
    session = chat(world)
    say(session, "weather in Lisbon?")
    say(session, '{"weather": "Lisbon sunny"}', role="tool", tool_call_id="c1")
    say(session, "Lisbon is sunny.", role="assistant", metadata={"reply_to": 1, "superseded": True})
    say(session, "Lisbon notice", role="system", metadata={"notice": "offline"})
    say(session, "/history Lisbon", metadata={"command": "history"})
    say(session, "Sunny in Lisbon today.", role="assistant", metadata={"reply_to": 1})
    assert found(world, "lisbon") == [(6, "Sunny in Lisbon today."), (1, "weather in Lisbon?")]


def test_a_message_carried_through_two_rotations_is_found_once_as_its_last_copy(world, settings):
    """Rotations (/compact, a manual compaction) carry a question still waiting for its
    answer into the fresh conversation, and again if that one is rotated before it is
    answered: the copy that goes on is found, never the ones left in the archives."""
    for legacy in (False, True):
        settings.QORVEN_LEGACY_SESSIONS = legacy
        first = chat(world, channel="telegram")
        say(first, f"what time is the ferry? {legacy}", channel="telegram", awaits_answer=True)
        second = session_rotate(session=first, carry_unanswered=True).session
        third = session_rotate(session=second, carry_unanswered=True).session
        assert Message.objects.filter(content=f"what time is the ferry? {legacy}").count() == 3
        hits = conversation_search(session=third, query=f"ferry {legacy}")
        assert [(h.session_id, h.seq, h.active) for h in hits] == [(third.pk, 1, True)]
    settings.QORVEN_LEGACY_SESSIONS = False
    assert [seq for seq, _ in found(world, "ferry false")] == [1]


def test_messages_carried_before_originals_were_marked_are_found_once_after_the_migration(world):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("sessions_app.migrations.0012_message_carried_to")
    old = chat(world)
    original = say(old, "the spare key is under the blue pot", awaits_answer=True)
    now = session_rotate(session=old, carry_unanswered=True).session
    # As a rotation before this version left it: the original unmarked.
    Message.objects.filter(pk=original.pk).update(metadata={})
    assert len(found(world, "spare key")) == 2
    migration.mark_originals(apps, None)
    migration.mark_originals(apps, None)  # twice changes nothing
    original.refresh_from_db()
    assert original.metadata == {"carried_to": {"session": now.pk, "seq": 1}}
    hits = message_search(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="spare key")
    assert [(h.session_id, h.seq) for h in hits] == [(now.pk, 1)]


def test_typed_search_syntax_is_only_words(world):
    say(chat(world), 'the "quoted" NEAR(thing) content: owner* OR AND')
    for query in ['"quoted', "NEAR(thing", "content:", "owner*", "OR AND", "'; DROP TABLE x; --", "-", "*"]:
        message_search(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query=query)  # no error
    assert [seq for seq, _ in found(world, 'NEAR(thing) "quoted"')] == [1]
    assert found(world, "owner*") == [(1, 'the "quoted" NEAR(thing) content: owner* OR AND')]


def test_deleted_and_edited_messages_follow_in_the_index(world):
    session = chat(world)
    kept = say(session, "the orchid needs water")
    gone = say(session, "the orchid is blooming")
    Message.objects.filter(pk=gone.pk).delete()
    assert found(world, "orchid") == [(1, "the orchid needs water")]
    Message.objects.filter(pk=kept.pk).update(content="the cactus needs water")
    assert found(world, "orchid") == [] and found(world, "cactus") == [(1, "the cactus needs water")]
    Session.objects.filter(pk=session.pk).delete()
    assert found(world, "cactus") == []


@pytest.mark.django_db(transaction=True)
def test_a_missing_search_trigger_fails_the_system_check(world):
    if connection.vendor != "sqlite":
        assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []
        return
    from sessions_app.migrations._trigger import SEARCH_TRIGGERS

    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER message_search_insert")
    try:
        errors = checks.run_checks(tags=[checks.Tags.database], databases=["default"])
        assert [e.id for e in errors] == ["sessions_app.E002"] and "message_search_insert" in errors[0].msg
    finally:
        with connection.cursor() as cursor:
            cursor.execute(SEARCH_TRIGGERS["message_search_insert"])
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []
