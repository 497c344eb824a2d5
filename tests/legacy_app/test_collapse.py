from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from legacy_app.collapse import collapse_sessions
from memory_app.models import Memory
from sessions_app.errors import SessionClosed
from sessions_app.models import Image, Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

from ..factories.tenancy import UserFactory

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


def at(minute: int) -> datetime:
    return T0 + timedelta(minutes=minute)


def legacy(world, channel, user=None, tenant=None, qor=None):
    user = user or world.alice
    return session_resolve(
        tenant=tenant or world.tenant_a,
        qor=qor or world.qor_a,
        channel=channel,
        user=user,
        sender_id=f"{channel}-{user.username}",
    )


def say(session, minute, content, role="user", channel=None, **extra):
    return message_append(
        session=session,
        role=role,
        content=content,
        channel=channel or session.channel or "web",
        created_at=at(minute),
        **extra,
    ).message


@pytest.fixture
def alice_three(world, settings):
    """Alice's legacy telegram, whatsapp and web sessions; 12 rows, 3 of them duplicates."""
    settings.QORVEN_LEGACY_SESSIONS = True
    tg, wa, web = legacy(world, "telegram"), legacy(world, "whatsapp"), legacy(world, "web")
    say(
        tg,
        0,
        "hello from the train",
        external_scope="telegram:1",
        external_id="77",
        metadata={"trust": "paired"},
    )
    say(tg, 1, "hi Alice", role="assistant")
    say(tg, 5, "remind me about milk")
    say(tg, 6, "noted", role="assistant")
    say(wa, 2, "whatsapp here")
    say(wa, 5, "remind me about milk")  # the same message mirrored to another channel
    say(wa, 6, "noted", role="assistant")
    say(wa, 8, "bye")
    say(web, 3, "on the web now")
    say(web, 3, "on the web now", role="assistant")  # same time and text, other role: kept
    say(web, 8, "bye")
    say(web, 9, "see you", role="assistant")
    return tg, wa, web


def snapshot(tenant=None):
    sessions = Session.objects.all() if tenant is None else Session.objects.filter(tenant=tenant)
    messages = Message.objects.filter(session__in=sessions)
    return (
        sorted(sessions.values_list("id", "kind", "state", "channel", "last_seq")),
        sorted(messages.values_list("id", "session_id", "seq", "role", "content", "channel")),
        sorted(
            Memory.objects.filter(tenant__in={s.tenant_id for s in sessions}).values_list(
                "id", "source_session_id"
            )
        ),
        sorted(Image.objects.values_list("id", "message_id")),
    )


def test_three_legacy_sessions_collapse_into_one_ordered_deduplicated_channel_tagged_chat(
    world, alice_three
):
    tg, wa, web = alice_three
    (outcome,) = list(collapse_sessions())
    assert (outcome.sessions, outcome.messages, outcome.duplicates, outcome.archived) == (
        3,
        12,
        3,
        3,
    )
    canonical = Session.objects.get(user=world.alice, kind="canonical", state="active")
    stored = list(
        canonical.messages.order_by("seq").values_list(
            "seq", "role", "channel", "content", "created_at"
        )
    )
    assert stored == [
        (1, "user", "telegram", "hello from the train", at(0)),
        (2, "assistant", "telegram", "hi Alice", at(1)),
        (3, "user", "whatsapp", "whatsapp here", at(2)),
        (4, "user", "web", "on the web now", at(3)),
        (5, "assistant", "web", "on the web now", at(3)),
        (6, "user", "telegram", "remind me about milk", at(5)),
        (7, "assistant", "telegram", "noted", at(6)),
        (8, "user", "whatsapp", "bye", at(8)),
        (9, "assistant", "web", "see you", at(9)),
    ]
    canonical.refresh_from_db()
    assert canonical.last_seq == 9 and canonical.replied_through_seq == 9
    assert canonical.started_at == min(s.started_at for s in (tg, wa, web))
    # The legacy sessions are archived; only the duplicate copies stay in them.
    for session in (tg, wa, web):
        session.refresh_from_db()
        assert session.state == "archived" and session.ended_at is not None
    assert sorted(
        Message.objects.filter(session__in=[tg, wa, web]).values_list("channel", "content")
    ) == [
        ("web", "bye"),
        ("whatsapp", "noted"),
        ("whatsapp", "remind me about milk"),
    ]
    assert Message.objects.filter(tenant=world.tenant_a).count() == 12  # nothing deleted
    # External ids and metadata moved with their row, so re-delivery is still deduped.
    first = canonical.messages.get(seq=1)
    assert (first.external_scope, first.external_id, first.metadata) == (
        "telegram:1",
        "77",
        {"trust": "paired"},
    )
    again = message_append(
        session=canonical,
        role="user",
        content="hello",
        channel="telegram",
        external_scope="telegram:1",
        external_id="77",
    )
    assert not again.created and again.message.pk == first.pk
    assert (
        message_append(session=canonical, role="user", content="next", channel="web").message.seq
        == 10
    )


def test_one_digest_per_archived_session_with_its_channels_period_and_text(world, alice_three):
    tg, wa, web = alice_three
    list(collapse_sessions())
    digests = {m.source_session_id: m for m in Memory.objects.filter(type="conversation_digest")}
    assert set(digests) == {tg.pk, wa.pk, web.pk}
    assert {(m.tenant_id, m.qor_id, m.user_id) for m in digests.values()} == {
        (world.tenant_a.pk, world.qor_a.pk, world.alice.pk)
    }
    wa_digest = digests[wa.pk]
    assert wa_digest.channels == ["whatsapp"]
    assert (wa_digest.period_start, wa_digest.period_end) == (at(2), at(8))
    assert "whatsapp" in wa_digest.content and "4 messages" in wa_digest.content
    assert "- whatsapp here" in wa_digest.content and "- remind me about milk" in wa_digest.content
    assert "noted" not in wa_digest.content  # only what the user wrote
    assert (digests[web.pk].period_start, digests[web.pk].period_end) == (at(3), at(9))
    assert len(digests[tg.pk].content) <= 1_500


def test_images_follow_their_row_and_a_dropped_copy_hands_its_image_to_the_kept_one(
    world, alice_three
):
    tg, wa, _ = alice_three
    kept_milk = tg.messages.get(content="remind me about milk")
    copy_milk = wa.messages.get(content="remind me about milk")
    photo = Image.objects.create(
        tenant=world.tenant_a, message=copy_milk, mime_type="image/png", data="aGk=", size=2
    )
    bye = wa.messages.get(content="bye")
    receipt = Image.objects.create(
        tenant=world.tenant_a, message=bye, mime_type="image/jpeg", data="eW8=", size=2
    )
    noted = wa.messages.get(content="noted")
    # The same sticker on both copies of "noted": the kept copy has it already.
    sticker = dict(tenant=world.tenant_a, mime_type="image/webp", data="c3Q=", size=2)
    Image.objects.create(message=tg.messages.get(content="noted"), **sticker)
    second_sticker = Image.objects.create(message=noted, **sticker)
    list(collapse_sessions())
    photo.refresh_from_db()
    receipt.refresh_from_db()
    second_sticker.refresh_from_db()
    assert photo.message_id == kept_milk.pk
    assert receipt.message_id == bye.pk
    assert second_sticker.message_id == noted.pk  # not doubled onto the kept copy
    canonical = Session.objects.get(user=world.alice, kind="canonical", state="active")
    in_chat = Image.objects.filter(message__session=canonical)
    assert sorted(in_chat.values_list("mime_type", flat=True)) == [
        "image/jpeg",
        "image/png",
        "image/webp",
    ]


def test_a_second_run_changes_nothing(world, alice_three):
    list(collapse_sessions())
    before = snapshot()
    assert list(collapse_sessions()) == []
    assert snapshot() == before


def test_dry_run_reports_per_user_and_changes_nothing(world, alice_three):
    legacy(world, "web", user=world.bob)
    say(legacy(world, "telegram", user=world.bob), 1, "bob here")
    before = snapshot()
    out = StringIO()
    call_command("collapse_sessions", "--dry-run", stdout=out)
    assert snapshot() == before
    text = out.getvalue()
    assert (
        "acme/aria alice: would merge 3 sessions with 12 messages into one chat of 9;"
        " would drop 3 duplicates, archive 3, write 3 digests"
    ) in text
    assert (
        "acme/aria bob: would merge 2 sessions with 1 message into one chat of 1;"
        " would drop 0 duplicates" in text
    )
    assert "nothing changed" in text


def test_command_applies_and_prints_a_summary(world, alice_three):
    out = StringIO()
    call_command("collapse_sessions", stdout=out)
    text = out.getvalue()
    assert "users collapsed" in text and "sessions archived" in text
    assert Session.objects.filter(user=world.alice, state="active").count() == 1
    out = StringIO()
    call_command("collapse_sessions", stdout=out)
    assert "Nothing to collapse" in out.getvalue()


def test_a_failure_midway_leaves_that_user_untouched_and_the_others_collapsed(world, alice_three):
    bob_tg, bob_web = (
        legacy(world, "telegram", user=world.bob),
        legacy(world, "web", user=world.bob),
    )
    say(bob_tg, 1, "bob on telegram")
    say(bob_web, 2, "bob on the web")
    alice_before = snapshot()[1]
    alice_rows = [row for row in alice_before if row[1] in {s.pk for s in alice_three}]

    def fail_for_alice(outcome):
        if outcome.owner.user_id == world.alice.pk:
            raise RuntimeError("injected failure")

    outcomes = {o.owner.user_id: o for o in collapse_sessions(before_archive=fail_for_alice)}
    assert "injected failure" in outcomes[world.alice.pk].error
    assert outcomes[world.bob.pk].applied and not outcomes[world.bob.pk].error
    # Alice: every row back where it was, no canonical session, no digest, all still active.
    after = sorted(
        Message.objects.filter(session__in=alice_three).values_list(
            "id", "session_id", "seq", "role", "content", "channel"
        )
    )
    assert after == alice_rows
    assert not Session.objects.filter(user=world.alice, kind="canonical").exists()
    assert set(Session.objects.filter(user=world.alice).values_list("state", flat=True)) == {
        "active"
    }
    assert not Memory.objects.filter(user=world.alice).exists()
    # Bob: collapsed.
    bob_chat = Session.objects.get(user=world.bob, kind="canonical", state="active")
    assert list(bob_chat.messages.values_list("seq", "channel")) == [(1, "telegram"), (2, "web")]
    assert Memory.objects.filter(user=world.bob, type="conversation_digest").count() == 2
    # Fixed and run again, Alice collapses too.
    list(collapse_sessions())
    assert Session.objects.get(user=world.alice, kind="canonical").messages.count() == 9


def test_the_command_exits_with_an_error_when_a_user_fails(world, alice_three, monkeypatch):
    import legacy_app.collapse.service as service

    def broken(**kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(service, "collapse_user", broken)
    out = StringIO()
    with pytest.raises(CommandError, match="1 user"):
        call_command("collapse_sessions", stdout=out)
    assert "FAILED acme/aria alice: RuntimeError: disk on fire" in out.getvalue()


def test_group_email_and_other_tenants_sessions_are_untouched(world, alice_three):
    group = session_resolve(
        tenant=world.tenant_a, qor=world.qor_a, channel="telegram", thread_id="-100", group=True
    )
    say(group, 4, "hello group", channel="telegram")
    email = session_resolve(
        tenant=world.tenant_a,
        qor=world.qor_a,
        channel="email",
        user=world.alice,
        thread_id="<t1@example.com>",
    )
    say(email, 4, "an email", channel="email")
    charlie_tg = legacy(
        world, "telegram", user=world.charlie, tenant=world.tenant_b, qor=world.qor_b
    )
    charlie_web = legacy(world, "web", user=world.charlie, tenant=world.tenant_b, qor=world.qor_b)
    say(charlie_tg, 1, "charlie's secret")
    say(charlie_web, 2, "charlie again")
    others = Session.objects.filter(pk__in=[group.pk, email.pk])
    others_before = sorted(
        Message.objects.filter(session__in=others).values_list("id", "session_id", "seq")
    )
    tenant_b_before = snapshot(world.tenant_b)
    outcomes = list(collapse_sessions(tenant=world.tenant_a))
    assert [o.label for o in outcomes] == ["acme/aria alice"]
    assert set(others.values_list("state", flat=True)) == {"active"}
    assert (
        sorted(Message.objects.filter(session__in=others).values_list("id", "session_id", "seq"))
        == others_before
    )
    assert snapshot(world.tenant_b) == tenant_b_before
    assert not Memory.objects.filter(tenant=world.tenant_b).exists()


def test_merging_into_an_existing_canonical_chat_keeps_it_and_renumbers(world, settings):
    canonical = session_resolve(
        tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice
    )
    for minute, text in ((1, "c1"), (4, "c4"), (7, "c7")):
        say(canonical, minute, text, channel="web")
    Session.objects.filter(pk=canonical.pk).update(compacted_through_seq=2)  # c1, c4 summarised
    settings.QORVEN_LEGACY_SESSIONS = True
    tg = legacy(world, "telegram")
    for minute, text in ((0, "t0"), (4, "c4"), (5, "t5"), (8, "t8")):
        say(tg, minute, text)
    (outcome,) = list(collapse_sessions())
    assert (outcome.canonical_id, outcome.archived, outcome.duplicates) == (canonical.pk, 1, 1)
    rows = list(canonical.messages.order_by("seq").values_list("seq", "content", "channel"))
    assert rows == [
        (1, "t0", "telegram"),
        (2, "c1", "web"),
        (3, "c4", "web"),
        (4, "t5", "telegram"),
        (5, "c7", "web"),
        (6, "t8", "telegram"),
    ]
    canonical.refresh_from_db()
    assert (canonical.state, canonical.last_seq) == ("active", 6)
    assert canonical.compacted_through_seq == 3  # still just after "c4"
    assert list(tg.messages.values_list("content", flat=True)) == ["c4"]  # the copy stays behind


def test_appending_to_a_collapsed_legacy_session_is_refused_and_resolve_finds_the_chat(
    world, alice_three, settings
):
    tg, _, _ = alice_three
    list(collapse_sessions())
    with pytest.raises(SessionClosed):
        message_append(session=tg, role="user", content="late", channel="telegram")
    settings.QORVEN_LEGACY_SESSIONS = False
    chat = session_resolve(
        tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice
    )
    assert chat.messages.count() == 9


def test_unpaired_legacy_senders_and_a_lone_canonical_chat_are_left_alone(world, settings):
    say(session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice), 1, "canonical")
    settings.QORVEN_LEGACY_SESSIONS = True
    stranger_a = session_resolve(
        tenant=world.tenant_a, qor=world.qor_a, channel="telegram", sender_id="999"
    )
    stranger_b = session_resolve(
        tenant=world.tenant_a, qor=world.qor_a, channel="whatsapp", sender_id="999"
    )
    say(stranger_a, 1, "who is this")
    before = snapshot()
    assert list(collapse_sessions()) == []
    assert snapshot() == before
    assert {stranger_a.user_id, stranger_b.user_id} == {None}


def test_a_users_lone_legacy_chat_becomes_their_canonical_chat(world, settings):
    settings.QORVEN_LEGACY_SESSIONS = True
    only = legacy(world, "telegram", user=world.bob)
    say(only, 1, "just telegram")
    say(only, 2, "an answer", role="assistant")
    (outcome,) = list(collapse_sessions())
    assert (outcome.applied, outcome.archived, outcome.messages) == (True, 1, 2)
    settings.QORVEN_LEGACY_SESSIONS = False
    canonical = Session.objects.get(kind="canonical", user=world.bob, state="active")
    rows = list(Message.objects.filter(session=canonical).order_by("seq").values_list("seq", "channel", "content"))
    assert rows == [(1, "telegram", "just telegram"), (2, "telegram", "an answer")]
    only.refresh_from_db()
    assert only.state == "archived"
    assert list(collapse_sessions()) == []  # done: a second run finds nothing


def test_the_help_says_who_is_collapsed_a_lone_legacy_chat_included(world, settings):
    """It said "more than one active chat-family session" and collapsed a lone legacy chat too."""
    from legacy_app.management.commands.collapse_sessions import Command

    settings.QORVEN_LEGACY_SESSIONS = True
    say(legacy(world, "telegram", user=world.bob), 1, "just telegram")
    out = StringIO()
    call_command("collapse_sessions", "--dry-run", stdout=out)
    assert "acme/aria bob: would merge 1 session" in out.getvalue()
    help_text = " ".join(Command.help.split())
    assert "more than one active chat-family session" not in help_text
    assert "with an active legacy per-channel chat session (" in help_text and "or alone" in help_text


@pytest.mark.django_db(transaction=True)
def test_parallel_jobs_collapse_every_user_like_one_job_does(world, settings):
    settings.QORVEN_LEGACY_SESSIONS = True
    users = [world.alice, world.bob] + [UserFactory(username=f"user-{i}") for i in range(6)]
    for user in users:
        for minute, channel in enumerate(("telegram", "whatsapp", "web")):
            say(legacy(world, channel, user=user), minute, f"{user.username} on {channel}")
        say(legacy(world, "web", user=user), 0, f"{user.username} on telegram")  # a copy: dropped
    failing = users[3].pk

    def fail_one(outcome):
        if outcome.owner.user_id == failing:
            raise RuntimeError("injected failure")

    outcomes = list(collapse_sessions(jobs=3, before_archive=fail_one))
    assert len(outcomes) == len(users)
    assert [o.owner.user_id for o in outcomes if o.error] == [failing]
    for user in users:
        chats = Session.objects.filter(user=user, kind="canonical", state="active")
        if user.pk == failing:
            assert not chats.exists()
            assert Session.objects.filter(user=user, kind="legacy", state="active").count() == 3
            continue
        assert list(chats.get().messages.order_by("seq").values_list("seq", "channel")) == [
            (1, "telegram"),
            (2, "whatsapp"),
            (3, "web"),
        ]
        assert Memory.objects.filter(user=user, type="conversation_digest").count() == 3


def test_the_command_can_be_scoped_to_one_user(world, alice_three):
    legacy(world, "web", user=world.bob)
    say(legacy(world, "telegram", user=world.bob), 1, "bob here")
    call_command(
        "collapse_sessions", "--user", "bob", "--tenant", "acme", "--qor", "aria", stdout=StringIO()
    )
    assert Session.objects.filter(user=world.bob, state="active").count() == 1
    assert Session.objects.filter(user=world.alice, kind="legacy", state="active").count() == 3
    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("collapse_sessions", "--user", "nobody", stdout=StringIO())
    with pytest.raises(CommandError, match="no tenant"):
        call_command("collapse_sessions", "--tenant", "nope", stdout=StringIO())


@pytest.mark.parametrize("option", ["--tenant", "--qor", "--user"])
def test_an_empty_scope_is_refused_not_read_as_everyone(world, alice_three, option):
    """`collapse-sessions --tenant "$T"` with T unset collapsed every user of every tenant."""
    with pytest.raises(CommandError, match=f"{option} needs"):
        call_command("collapse_sessions", option, "", stdout=StringIO())
    assert Session.objects.filter(user=world.alice, kind="legacy", state="active").count() == 3


@pytest.mark.django_db(transaction=True)
def test_an_append_racing_the_collapse_waits_and_is_refused_by_the_archived_session(
    world, alice_three
):
    telegram = alice_three[0]
    collapsing, outcome = threading.Event(), {}

    def late_append() -> None:
        collapsing.wait(10)
        try:
            message_append(session=telegram, role="user", content="late", channel="telegram")
            outcome["append"] = "stored"
        except SessionClosed:
            outcome["append"] = "refused"
        finally:
            connection.close()

    appender = threading.Thread(target=late_append)
    appender.start()

    def hold(_):
        collapsing.set()
        time.sleep(0.5)  # the appender now waits for the collapse's locks

    (result,) = list(collapse_sessions(before_archive=hold))
    appender.join(30)
    assert result.applied and outcome["append"] == "refused"
    assert not Message.objects.filter(content="late").exists()
    chat = Session.objects.get(user=world.alice, kind="canonical", state="active")
    assert (
        message_append(session=chat, role="user", content="later", channel="telegram").message.seq
        == 10
    )


def test_owners_are_paged_by_key_so_every_user_is_reached(world, alice_three, monkeypatch):
    import legacy_app.collapse.owners as owners

    monkeypatch.setattr(owners, "OWNER_PAGE", 1)
    legacy(world, "web", user=world.bob)
    say(legacy(world, "telegram", user=world.bob), 1, "bob here")
    charlie = dict(user=world.charlie, tenant=world.tenant_b, qor=world.qor_b)
    legacy(world, "web", **charlie)
    legacy(world, "telegram", **charlie)
    labels = [o.label for o in collapse_sessions()]
    assert labels == ["acme/aria alice", "acme/aria bob", "globex/aria charlie"]
    assert Session.objects.filter(kind="canonical", state="active").count() == 3


def test_a_message_still_waiting_when_collapsed_is_history_not_a_question_to_answer(world, settings):
    """Merged history is not answered (the chat counts it as replied to): a legacy message
    still waiting for its answer is not answered by the next turn, on its old channel."""
    from sessions_app.selectors import answerable

    settings.QORVEN_LEGACY_SESSIONS = True
    say(legacy(world, "telegram"), 0, "old question never answered", awaits_answer=True)
    settings.QORVEN_LEGACY_SESSIONS = False
    (outcome,) = list(collapse_sessions())
    canonical = Session.objects.get(pk=outcome.canonical_id)
    (old,) = canonical.messages.all()
    assert (old.answer_state, canonical.replied_through_seq) == ("answered", 1)
    assert not answerable(canonical.messages.all()).exists()


def test_a_reply_still_names_its_question_after_the_renumbering(world, settings):
    """Every kept row gets a new seq; a reply's `reply_to` follows its question's, so the
    page pairs them and "regenerate" replaces the answer instead of adding a second."""
    from sessions_app.services.answers import reply_supersede

    canonical = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    question = say(canonical, 10, "web question", awaits_answer=True)
    say(canonical, 11, "web answer", role="assistant", metadata={"reply_to": question.seq})
    Message.objects.filter(pk=question.pk).update(answer_state="answered")
    settings.QORVEN_LEGACY_SESSIONS = True
    tg = legacy(world, "telegram")
    tg_question = say(tg, 0, "telegram question")
    say(tg, 1, "telegram answer", role="assistant", metadata={"reply_to": tg_question.seq})
    list(collapse_sessions())
    rows = {m.content: m for m in canonical.messages.all()}
    assert rows["web answer"].metadata["reply_to"] == rows["web question"].seq == 3
    assert rows["telegram answer"].metadata["reply_to"] == rows["telegram question"].seq == 1
    assert reply_supersede(session=canonical, reply_to=rows["web question"].seq) == [rows["web answer"].seq]


def test_a_suspended_workspace_is_skipped_and_said_so_and_collapsed_once_resumed(
    world, alice_three, model_server, drain, settings
):
    """Suspended, a workspace is kept as it is: its people's chats are not merged, no
    digest is written and no turn queued (so no model call) until the host resumes it;
    the run and its dry run say which workspace was skipped and why."""
    from tenancy.services import tenant_resume, tenant_suspend

    say(legacy(world, "telegram", user=world.charlie, tenant=world.tenant_b, qor=world.qor_b), 1, "charlie here")
    settings.QORVEN_LEGACY_SESSIONS = False
    canonical = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    say(canonical, 10, "a question still waiting", channel="web", awaits_answer=True)
    tenant_suspend(tenant=world.tenant_a)
    acme_before = snapshot(world.tenant_a)
    skipped = ("Skipped acme: the workspace is suspended, 1 user's chats left untouched;"
               " resume it and run again.")

    out = StringIO()
    call_command("collapse_sessions", "--dry-run", stdout=out)
    text = out.getvalue()
    assert skipped in text
    assert "globex/aria charlie: would merge 1 session" in text and "acme/aria alice" not in text

    out = StringIO()
    call_command("collapse_sessions", stdout=out, verbosity=2)
    drain()
    text = out.getvalue()
    assert skipped in text and "acme/aria alice" not in text
    assert "globex/aria charlie: merged 1 session" in text
    assert snapshot(world.tenant_a) == acme_before
    assert Session.objects.get(user=world.charlie, state="active").kind == "canonical"
    assert model_server.requests == []

    out = StringIO()
    call_command("collapse_sessions", "--tenant", "acme", stdout=out)
    assert skipped in out.getvalue() and "Nothing else to collapse" in out.getvalue()
    assert snapshot(world.tenant_a) == acme_before

    tenant_resume(tenant=world.tenant_a)
    out = StringIO()
    call_command("collapse_sessions", stdout=out, verbosity=2)
    assert "acme/aria alice: merged 4 sessions" in out.getvalue() and "Skipped" not in out.getvalue()


def test_a_workspace_suspended_while_the_run_goes_leaves_its_user_untouched(world, alice_three):
    from legacy_app.collapse import CollapseConflict, collapse_owners, collapse_user
    from tenancy.services import tenant_suspend

    (owner,) = collapse_owners()
    tenant_suspend(tenant=world.tenant_a)
    before = snapshot()
    with pytest.raises(CollapseConflict, match="suspended"):
        collapse_user(owner=owner)
    assert snapshot() == before


@pytest.mark.django_db
def test_a_telegram_account_paired_again_to_someone_else_is_collapsed_into_each_persons_own_chat(world, settings):
    """One Telegram account, Alice's, then (unlinked and approved for him) Bob's: each one's
    words go into their own canonical chat, never Bob's into Alice's."""
    settings.QORVEN_LEGACY_SESSIONS = True
    hers = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice,
                           sender_id="42")
    say(hers, 0, "my bank PIN is 4711")
    his = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.bob,
                          sender_id="42")
    say(his, 5, "hello, new phone")
    settings.QORVEN_LEGACY_SESSIONS = False

    list(collapse_sessions())

    def chat(user):
        return list(Message.objects.filter(session__user=user, session__kind="canonical",
                                           session__state="active").values_list("content", flat=True))

    assert chat(world.bob) == ["hello, new phone"]
    assert "hello, new phone" not in chat(world.alice)
