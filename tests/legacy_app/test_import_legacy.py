from __future__ import annotations

import json
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from legacy_app.legacy_import import legacy_import
from memory_app.models import Memory
from sessions_app.models import Message, Session
from tenancy.models import Membership


def line(**overrides):
    base = {
        "tenant": "acme",
        "qor": "aria",
        "user": "alice",
        "session": "tg-42",
        "role": "user",
        "content": "hello",
        "channel": "telegram",
        "created_at": "2024-05-01T09:00:00+00:00",
        "sender_name": "Alice",
    }
    base.update(overrides)
    return json.dumps({k: v for k, v in base.items() if v is not None})


def write(tmp_path, lines, name="export.jsonl"):
    path = tmp_path / name
    path.write_bytes(
        b"".join((ln if isinstance(ln, bytes) else ln.encode()) + b"\n" for ln in lines)
    )
    return path


GOOD = [
    line(content="hello from the train", created_at="2024-05-01T09:00:00Z"),
    line(
        role="assistant", content="hi Alice", sender_name="Aria", created_at="2024-05-01T09:01:00Z"
    ),
    line(
        session="wa-7",
        channel="whatsapp",
        content="whatsapp here",
        created_at="2024-05-01T09:02:00Z",
    ),
    line(
        user="dave",
        session="web-dave",
        channel="web",
        content="new here",
        created_at="2024-05-02T10:00:00Z",
    ),
]


def test_import_creates_legacy_sessions_users_and_keeps_timestamps(world, tmp_path):
    out = StringIO()
    call_command("import_legacy", str(write(tmp_path, GOOD)), stdout=out)
    tg = Session.objects.get(kind="legacy", channel="telegram", external_thread_id="tg-42")
    assert (tg.tenant, tg.qor, tg.user, tg.state) == (
        world.tenant_a,
        world.qor_a,
        world.alice,
        "active",
    )
    assert tg.started_at == datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
    rows = list(
        tg.messages.order_by("seq").values_list(
            "seq", "role", "content", "channel", "sender_name", "created_at"
        )
    )
    assert rows == [
        (
            1,
            "user",
            "hello from the train",
            "telegram",
            "Alice",
            datetime(2024, 5, 1, 9, 0, tzinfo=UTC),
        ),
        (2, "assistant", "hi Alice", "telegram", "Aria", datetime(2024, 5, 1, 9, 1, tzinfo=UTC)),
    ]
    assert tg.messages.first().metadata == {"legacy": {"session": "tg-42"}}
    tg.refresh_from_db()
    assert tg.last_seq == 2 and tg.replied_through_seq == 2  # history is not answered again
    wa = Session.objects.get(kind="legacy", channel="whatsapp", external_thread_id="wa-7")
    assert wa.user == world.alice and wa.messages.get().content == "whatsapp here"
    dave = get_user_model().objects.get(username="dave")
    assert not dave.has_usable_password()
    assert Membership.objects.get(tenant=world.tenant_a, user=dave).role == "member"
    assert Session.objects.get(external_thread_id="web-dave").user == dave
    text = out.getvalue()
    assert "messages imported" in text and "users created" in text


def test_bad_lines_are_reported_by_line_number_and_skipped(world, tmp_path):
    lines = [
        GOOD[0],  # 1 ok
        "{not json",  # 2
        line(content="x", tenant="nope"),  # 3
        line(content="x", qor="ghost"),  # 4
        line(content="x", role="wizard"),  # 5
        line(content="x", channel="pigeon"),  # 6
        line(content="x", created_at="yesterday-ish"),  # 7
        line(content="x", user=None),  # 8 missing user
        "[1, 2, 3]",  # 9
        b"\xff\xfe not utf-8",  # 10
        "",  # 11 blank: ignored
        line(content="x", session="tg-42", user="bob"),  # 12 alice's session
        line(content=42),  # 13
        GOOD[2],  # 14 ok
        line(content="x", created_at="9999-12-31T23:59:59-14:00"),  # 15: past year 9999 in UTC
        line(content="x", created_at="0001-01-01T00:00:00+14:00"),  # 16: before year 1 in UTC
        '{"content": "a\tb"}',  # 17: a raw tab inside a string
    ]
    out = StringIO()
    with pytest.raises(CommandError, match="14 bad line.*; the other 2 message"):
        call_command("import_legacy", str(write(tmp_path, lines)), stdout=out)
    # Run again: the good lines are there already, and the message says so.
    with pytest.raises(CommandError, match="already imported, so nothing new was stored"):
        call_command("import_legacy", str(write(tmp_path, lines)), stdout=StringIO())
    text = out.getvalue()
    for number, reason in [
        (2, "invalid JSON"),
        (3, "unknown tenant 'nope'"),
        (4, "unknown qor 'ghost'"),
        (5, "bad role 'wizard'"),
        (6, "bad channel 'pigeon'"),
        (7, "bad created_at"),
        (8, "missing 'user'"),
        (9, "not a JSON object"),
        (10, "not valid UTF-8"),
        (12, "session 'tg-42' on telegram belongs to another user"),
        (13, "'content' must be a string"),
        (15, "created_at out of range"),
        (16, "created_at out of range"),
        (17, "invalid JSON (Invalid control character at column 15)"),  # not "character at at column"
    ]:
        assert f"line {number}: {reason}" in text, (number, text)
    assert "line 11" not in text and "line 1:" not in text and "line 14" not in text
    assert sorted(Message.objects.values_list("content", flat=True)) == [
        "hello from the train",
        "whatsapp here",
    ]
    # The refused line 12 left nothing behind: no session for bob.
    assert not Session.objects.filter(user=world.bob).exists()


def test_reimporting_the_same_file_adds_nothing(world, tmp_path):
    path = write(tmp_path, GOOD)
    first = legacy_import(lines=path.read_bytes().splitlines())
    assert (first.imported, first.already_present, first.sessions_created, first.users_created) == (
        4,
        0,
        3,
        1,
    )
    before = sorted(Message.objects.values_list("id", "session_id", "seq"))
    second = legacy_import(lines=path.read_bytes().splitlines())
    assert (
        second.imported,
        second.already_present,
        second.sessions_created,
        second.users_created,
    ) == (0, 4, 0, 0)
    assert sorted(Message.objects.values_list("id", "session_id", "seq")) == before


def test_a_timestamp_without_offset_is_read_in_the_tenants_timezone(world):
    world.tenant_a.timezone = "Europe/Paris"
    world.tenant_a.save(update_fields=["timezone"])
    legacy_import(lines=[line(created_at="2024-05-01T11:00:00")])
    assert Message.objects.get().created_at == datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


def test_imported_history_is_not_broadcast_or_delivered(world, django_capture_on_commit_callbacks):
    """No append is told to the surfaces or to delivery (what they observe), once the
    import's transaction commits; the people it adds are told of as any change of access."""
    from channels_app.models import OutboundDelivery
    from sessions_app.signals import message_appended

    appended = []

    def observed(sender, message, **kwargs):
        appended.append(message)

    message_appended.connect(observed)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            legacy_import(lines=GOOD)
    finally:
        message_appended.disconnect(observed)
    assert Message.objects.count() == 4
    assert appended == []
    assert not OutboundDelivery.objects.exists()


def test_import_then_collapse_gives_one_chat_per_user(world, tmp_path):
    lines = [
        *GOOD,
        # The same reply mirrored into the whatsapp session: a duplicate for the collapse.
        line(
            session="wa-7",
            channel="whatsapp",
            role="assistant",
            content="hi Alice",
            sender_name="Aria",
            created_at="2024-05-01T09:01:00Z",
        ),
        line(
            session="web-a", channel="web", content="on the web", created_at="2024-05-01T09:03:00Z"
        ),
        line(
            user="charlie",
            tenant="globex",
            session="c1",
            content="globex tg",
            created_at="2024-05-01T08:00:00Z",
        ),
        line(
            user="charlie",
            tenant="globex",
            session="c2",
            channel="web",
            content="globex web",
            created_at="2024-05-01T08:01:00Z",
        ),
    ]
    call_command("import_legacy", str(write(tmp_path, lines)), stdout=StringIO())
    out = StringIO()
    call_command("collapse_sessions", "--tenant", "acme", stdout=out)
    chat = Session.objects.get(user=world.alice, kind="canonical", state="active")
    assert list(chat.messages.order_by("seq").values_list("seq", "channel", "content")) == [
        (1, "telegram", "hello from the train"),
        (2, "telegram", "hi Alice"),
        (3, "whatsapp", "whatsapp here"),
        (4, "web", "on the web"),
    ]
    assert Session.objects.filter(user=world.alice, kind="legacy", state="archived").count() == 3
    assert Memory.objects.filter(user=world.alice, type="conversation_digest").count() == 3
    # dave has one legacy session only: it becomes his chat (else his history is on no
    # surface); charlie is in globex, outside --tenant acme: untouched.
    assert set(Session.objects.filter(user__username="dave").values_list("kind", "state")) == {
        ("legacy", "archived"), ("canonical", "active")
    }
    assert Session.objects.get(user__username="dave", kind="canonical").messages.count() == 1
    assert set(Session.objects.filter(user=world.charlie).values_list("kind", "state")) == {
        ("legacy", "active")
    }
    # Re-importing after the collapse revives nothing.
    summary = legacy_import(lines=lines)
    assert summary.imported == 0 and summary.sessions_created == 0
    assert list(collapse_sessions_users()) == []


def collapse_sessions_users():
    from legacy_app.collapse import collapse_owners

    return collapse_owners(
        tenant=None, qor_slug="aria", user=get_user_model().objects.get(username="alice")
    )


def test_a_missing_file_is_a_clear_error(world, tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        call_command("import_legacy", str(tmp_path / "nope.jsonl"), stdout=StringIO())


def test_a_session_archived_during_the_import_gets_a_fresh_one_for_later_lines(world, monkeypatch):
    import legacy_app.legacy_import as legacy

    monkeypatch.setattr(legacy, "BATCH_LINES", 2)

    def lines():
        yield line(content="one", created_at="2024-05-01T09:00:00Z")
        yield line(content="two", created_at="2024-05-01T09:01:00Z")
        # collapse-sessions runs between two batches and archives the session.
        Session.objects.filter(external_thread_id="tg-42").update(state="archived")
        yield line(content="three", created_at="2024-05-01T09:02:00Z")
        yield line(content="four", created_at="2024-05-01T09:03:00Z")

    summary = legacy_import(lines=lines())
    assert (summary.imported, summary.skipped, summary.sessions_created) == (4, 0, 2)
    sessions = Session.objects.filter(external_thread_id="tg-42").order_by("id")
    assert [(s.state, list(s.messages.values_list("seq", "content"))) for s in sessions] == [
        ("archived", [(1, "one"), (2, "two")]),
        ("active", [(1, "three"), (2, "four")]),
    ]
