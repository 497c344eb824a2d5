from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction

from sessions_app.errors import SessionClosed
from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from sessions_app.signals import message_appended


def canonical(world, user=None):
    return session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=user or world.alice)


def test_append_stores_channel_sender_and_time_with_increasing_seq(world):
    session = canonical(world)
    first = message_append(session=session, role="user", content="hi", channel="telegram", sender_name="Alice")
    second = message_append(session=session, role="assistant", content="hello!", channel="telegram")
    assert (first.created, second.created) == (True, True)
    rows = list(Message.objects.filter(session=session).order_by("seq"))
    assert [(m.seq, m.role, m.channel, m.sender_name) for m in rows] == [
        (1, "user", "telegram", "Alice"),
        (2, "assistant", "telegram", ""),
    ]
    assert rows[0].created_at <= rows[1].created_at
    assert rows[0].tenant_id == world.tenant_a.pk
    session.refresh_from_db()
    assert session.last_seq == 2


def test_a_delivered_twice_external_id_is_stored_once(world):
    session = canonical(world)
    a = message_append(
        session=session, role="user", content="ping", channel="telegram", external_scope="telegram:1", external_id="77"
    )
    b = message_append(
        session=session, role="user", content="ping", channel="telegram", external_scope="telegram:1", external_id="77"
    )
    assert a.created and not b.created
    assert b.message.pk == a.message.pk
    assert Message.objects.filter(session=session).count() == 1
    session.refresh_from_db()
    assert session.last_seq == 1  # no seq was burnt by the duplicate
    # The same platform id from another binding is another message.
    c = message_append(
        session=session, role="user", content="ping", channel="telegram", external_scope="telegram:2", external_id="77"
    )
    assert c.created and c.message.seq == 2


def test_database_enforces_unique_seq_and_unique_external_id(world):
    session = canonical(world)
    message_append(session=session, role="user", content="x", channel="web", external_scope="s", external_id="e1")
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.create(tenant=world.tenant_a, session=session, seq=1, role="user", content="y", channel="web")
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.create(
            tenant=world.tenant_a, session=session, seq=9, role="user", content="y", channel="web",
            external_scope="s", external_id="e1",
        )


def test_appending_to_an_archived_session_is_refused(world):
    session = canonical(world)
    Session.objects.filter(pk=session.pk).update(state=Session.State.ARCHIVED)
    with pytest.raises(SessionClosed):
        message_append(session=session, role="user", content="late", channel="web")
    assert not Message.objects.filter(session=session).exists()


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_an_append_is_its_own_and_refuses_an_archived_session(world):
    session = canonical(world)
    stored = [message_append(session=session, role="user", content=f"m{i}", channel="web").message for i in range(3)]
    assert [m.seq for m in stored] == [1, 2, 3]
    assert list(Message.objects.filter(session=session).values_list("seq", "content")) == [
        (1, "m0"), (2, "m1"), (3, "m2")
    ]
    session.refresh_from_db()
    assert session.last_seq == 3
    Session.objects.filter(pk=session.pk).update(state=Session.State.ARCHIVED)
    with pytest.raises(SessionClosed):
        message_append(session=session, role="user", content="late", channel="web")
    session.refresh_from_db()
    assert (session.last_seq, Message.objects.filter(session=session).count()) == (3, 3)


def test_a_refused_append_of_a_platform_message_leaves_the_callers_transaction_usable(world):
    session = canonical(world)
    message_append(session=session, role="user", content="x", channel="web")
    with transaction.atomic():
        # Another writer took seq 2 behind the session's back: the append is refused by
        # the unique seq, and only its own savepoint is rolled back (a message with a
        # platform id runs in one, for the duplicate that races in).
        Message.objects.create(tenant=world.tenant_a, session=session, seq=2, role="user", content="y", channel="web")
        Session.objects.filter(pk=session.pk).update(last_seq=1)
        with pytest.raises(IntegrityError):
            message_append(session=session, role="user", content="z", channel="telegram", external_scope="b1",
                           external_id="77")
        assert Message.objects.filter(session=session).count() == 2


@pytest.mark.django_db(transaction=True)
def test_observers_hear_of_an_append_only_after_commit(world):
    heard: list[int] = []

    def listener(sender, message, **kwargs):
        heard.append(message.seq)

    message_appended.connect(listener)
    try:
        session = canonical(world)
        with transaction.atomic():
            message_append(session=session, role="user", content="one", channel="web")
            assert heard == []
        assert heard == [1]
        with pytest.raises(RuntimeError), transaction.atomic():
            message_append(session=session, role="user", content="rolled back", channel="web")
            raise RuntimeError("boom")
        assert heard == [1]
        assert list(Message.objects.filter(session=session).values_list("content", flat=True)) == ["one"]
    finally:
        message_appended.disconnect(listener)


def _in_threads(count: int, target) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            target(i)
        except BaseException as exc:  # collected and asserted on below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return errors


@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_appends_get_seq_1_to_50_without_gap_or_duplicate(world):
    session = canonical(world)

    def append(i: int) -> None:
        message_append(session=session, role="user", content=f"m{i}", channel="web")

    assert _in_threads(50, append) == []
    seqs = sorted(Message.objects.filter(session=session).values_list("seq", flat=True))
    assert seqs == list(range(1, 51))
    contents = set(Message.objects.filter(session=session).values_list("content", flat=True))
    assert contents == {f"m{i}" for i in range(50)}
    session.refresh_from_db()
    assert session.last_seq == 50


@pytest.mark.django_db(transaction=True)
def test_concurrent_deliveries_of_one_external_id_store_one_row(world):
    session = canonical(world)
    results = []

    def deliver(i: int) -> None:
        results.append(
            message_append(
                session=session, role="user", content="same update", channel="telegram",
                external_scope="telegram:9", external_id="update-1",
            )
        )

    assert _in_threads(10, deliver) == []
    assert Message.objects.filter(session=session).count() == 1
    assert sum(r.created for r in results) == 1
    assert {r.message.pk for r in results} == {Message.objects.get(session=session).pk}
    session.refresh_from_db()
    assert session.last_seq == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_first_messages_create_one_canonical_session(world):
    sessions = []

    def first_message(i: int) -> None:
        channel = ("web", "telegram", "whatsapp")[i % 3]
        s = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel=channel, user=world.alice)
        message_append(session=s, role="user", content=f"hi {i}", channel=channel)
        sessions.append(s.pk)

    assert _in_threads(9, first_message) == []
    assert len(set(sessions)) == 1
    assert Session.objects.filter(user=world.alice, kind="canonical").count() == 1
    assert Message.objects.filter(session_id=sessions[0]).count() == 9


@pytest.mark.django_db(transaction=True)
def test_every_append_is_one_query_through_djangos_cursor(world, django_assert_num_queries):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    with django_assert_num_queries(1) as captured:
        message_append(session=session, role="user", content="counted", channel="web", notify=False)
    assert "INSERT INTO" in captured.captured_queries[0]["sql"]


@pytest.mark.django_db(transaction=True)
def test_a_missing_sqlite_trigger_fails_the_system_check(world):
    from django.core import checks
    from django.db import connection

    if connection.vendor != "sqlite":
        assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []
        return
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER message_advances_session_last_seq")
    try:
        errors = checks.run_checks(tags=[checks.Tags.database], databases=["default"])
        assert [e.id for e in errors] == ["sessions_app.E001"]
    finally:
        from sessions_app.migrations._trigger import CREATE_TRIGGER

        with connection.cursor() as cursor:
            cursor.execute(CREATE_TRIGGER)
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []


@pytest.mark.django_db(transaction=True)
def test_an_install_from_before_the_append_trigger_migrates_with_its_checks(world, schema):
    """`qorven migrate` runs the database checks before it migrates. An install whose
    conversation store is at 0002 has the messages table and not yet the trigger 0003
    adds: the check took that for a trigger a rebuild had lost, and the upgrade stopped
    there."""
    from django.core import checks
    from django.core.management import call_command

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="user", content="kept", channel="web", notify=False)
    schema.to([("sessions_app", "0002_message_fk_indexes")])
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []
    call_command("migrate", interactive=False, verbosity=0, skip_checks=False)
    assert list(Message.objects.values_list("content", flat=True)) == ["kept"]
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []


@pytest.mark.django_db(transaction=True)
def test_the_time_of_a_message_is_taken_when_it_gets_its_seq(world):
    """created_at follows seq: the time is read inside the statement that allocates the
    seq (under the session's lock), not before it waits for that lock."""
    import time as clock

    from django.db import connections
    from django.utils import timezone

    session = canonical(world)
    message_append(session=session, role="user", content="first", channel="web")
    held, released_at = threading.Event(), []

    def hold_the_lock() -> None:
        other = connections.create_connection("default")
        try:
            with other.cursor() as cursor:
                if connection.vendor == "postgresql":
                    other.set_autocommit(False)
                    cursor.execute("SELECT id FROM sessions_app_session WHERE id = %s FOR UPDATE", [session.pk])
                else:
                    cursor.execute("BEGIN IMMEDIATE")  # SQLite's write lock
                    cursor.execute("UPDATE sessions_app_session SET last_seq = last_seq WHERE id = %s", [session.pk])
                held.set()
                clock.sleep(0.6)
                released_at.append(timezone.now())
                if connection.vendor == "postgresql":
                    other.commit()
                else:
                    cursor.execute("COMMIT")
        finally:
            other.close()

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    assert held.wait(10)
    second = message_append(session=session, role="user", content="second", channel="web").message
    holder.join(10)
    stored = Message.objects.get(pk=second.pk)
    assert stored.created_at >= released_at[0] - timedelta(milliseconds=5)  # not when it started to wait
    assert second.created_at == stored.created_at  # what the caller holds is what was stored


def test_only_a_reply_or_notice_for_a_platform_is_stored_waiting_for_its_delivery_to_be_planned(world):
    """The mark the sweeper finds a reply by when the process that stored it died before
    delivery planned it (channels_app.sweep), written by the append's own statement: set
    for what delivery is told of and sends, never for history stored without telling it."""
    session = canonical(world)
    marked = {
        "reply": dict(role="assistant", channel="telegram"),
        "notice": dict(role="system", channel="whatsapp"),
        "group reply": dict(role="assistant", channel="slack"),
        "email": dict(role="assistant", channel="email"),
    }
    unmarked = {
        "on the web": dict(role="assistant", channel="web"),
        "from the person": dict(role="user", channel="telegram"),
        "tool call": dict(role="assistant", channel="telegram", tool_calls=[{"id": "c1", "type": "function"}]),
        "tool result": dict(role="tool", channel="telegram", tool_call_id="c1"),
        "imported": dict(role="assistant", channel="telegram", notify=False),
    }
    appended = {name: message_append(session=session, content=name, **kw).message
                for name, kw in {**marked, **unmarked}.items()}
    stored = dict(Message.objects.filter(session=session).values_list("content", "delivery_unplanned"))
    assert {name for name, flag in stored.items() if flag} == set(marked)
    assert {name: bool(m.delivery_unplanned) for name, m in appended.items()} == {
        name: name in marked for name in appended}
