from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app.selectors import messages_read
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve


def fill(world, count=30):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    channels = ["web", "telegram", "whatsapp"]
    for i in range(1, count + 1):
        message_append(session=session, role="user", content=f"m{i}", channel=channels[i % 3])
    return session


def test_read_all_newest_n_oldest_first(world):
    session = fill(world)
    page = messages_read(session=session, limit=5)
    assert [m.seq for m in page] == [26, 27, 28, 29, 30]


def test_read_one_channel_only(world):
    session = fill(world)
    page = messages_read(session=session, channel="telegram", limit=4)
    assert [m.channel for m in page] == ["telegram"] * 4
    assert [m.seq for m in page] == [19, 22, 25, 28]


def test_read_after_seq_is_catch_up_in_order(world):
    session = fill(world)
    assert [m.seq for m in messages_read(session=session, after_seq=27, limit=50)] == [28, 29, 30]
    assert [m.seq for m in messages_read(session=session, after_seq=5, limit=3)] == [6, 7, 8]
    assert [m.seq for m in messages_read(session=session, channel="web", after_seq=20)] == [21, 24, 27, 30]


def test_read_before_seq_scrolls_back(world):
    session = fill(world)
    assert [m.seq for m in messages_read(session=session, before_seq=10, limit=3)] == [7, 8, 9]


def test_read_never_crosses_sessions(world):
    session = fill(world, count=6)
    other = session_resolve(tenant=world.tenant_b, qor=world.qor_b, channel="web", user=world.charlie)
    message_append(session=other, role="user", content="charlie's secret", channel="telegram")
    assert "charlie's secret" not in [m.content for m in messages_read(session=session, limit=100)]


def test_per_channel_read_uses_the_surface_index(world):
    session = fill(world, count=9)
    with CaptureQueriesContext(connection) as ctx:
        messages_read(session=session, channel="telegram", limit=50)
    (query,) = ctx.captured_queries
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
            plan = " ".join(str(row) for row in cursor.fetchall())
        else:
            # A tiny table would be scanned anyway; ask what the planner does at scale.
            cursor.execute("ANALYZE sessions_app_message")
            cursor.execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
            cursor.execute("EXPLAIN " + query["sql"])
            plan = " ".join(row[0] for row in cursor.fetchall())
            cursor.execute("RESET enable_seqscan; RESET enable_bitmapscan")
    # One of the two (session, channel, …) indexes: (…, seq) reads the newest without a sort,
    # (…, created_at) is SPEC's and sorts the few rows it finds; which one PostgreSQL picks
    # follows the statistics an earlier test's large table left. Never the whole session.
    assert "message_surface_seq_idx" in plan or "message_surface_time_idx" in plan, plan
    assert "Seq Scan" not in plan and "SCAN sessions_app_message" not in plan, plan  # SQLite: SEARCH, not SCAN


def test_read_rows_carry_what_was_stored_decoded(world):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    calls = [{"id": "c1", "type": "function", "function": {"name": "memory_search", "arguments": "{}"}}]
    stored = message_append(
        session=session, role="assistant", content="", channel="telegram", sender_name="Aria",
        tool_calls=calls, metadata={"reply_to": 3, "notice": ""},
    ).message
    message_append(session=session, role="tool", content="[]", channel="telegram", tool_call_id="c1")
    first, second = messages_read(session=session, channel="telegram", limit=10)
    assert (first.id, first.session_id, first.seq, first.role, first.sender_name) == (
        stored.pk, session.pk, 1, "assistant", "Aria"
    )
    assert first.tool_calls == calls and first.metadata == {"reply_to": 3, "notice": ""}
    assert first.created_at == stored.created_at and first.created_at.tzinfo is not None
    assert (second.tool_calls, second.tool_call_id, second.metadata) == (None, "c1", {})
    message_append(session=session, role="assistant", content="Nothing found.", channel="telegram")
    *_, third = messages_read(session=session, channel="telegram", limit=10)
    third.metadata["mine"] = True  # a reader may change the dict it got: no other row's changes
    assert second.metadata == {} and messages_read(session=session, channel="telegram", limit=1)[0].metadata == {}


def test_a_turn_reads_its_message_with_the_session_in_one_query_and_never_another_tenants(world):
    from sessions_app.selectors import pending_with_session

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="user", content="answered already", channel="web")
    first = message_append(session=session, role="user", content="first", channel="web", awaits_answer=True).message
    message_append(session=session, role="user", content="second", channel="web", awaits_answer=True)

    with CaptureQueriesContext(connection) as read:
        pending = pending_with_session(tenant_id=world.tenant_a.pk, session_id=session.pk)
        assert (pending.pk, pending.content) == (first.pk, "first")
        assert (pending.session.pk, pending.session.state) == (session.pk, "active")
        assert (pending.session.tenant.slug, pending.session.qor.pk, pending.session.user.pk) == (
            world.tenant_a.slug, world.qor_a.pk, world.alice.pk)
    assert len(read) == 1
    assert pending_with_session(tenant_id=world.tenant_b.pk, session_id=session.pk) is None
