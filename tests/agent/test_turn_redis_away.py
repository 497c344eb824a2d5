"""A message's turn while the cache (Redis) is away: where the cache only spares work,
the turn carries on without it; where it keeps one turn at a time on a session, the
turn's task comes back on the worker's timer and the message is answered once Redis is
back — never lost, never twice. The cache is a Redis server of the test's own, really
stopped; the rest of the layout as it is."""
from __future__ import annotations

import logging
import threading

import pytest
from django.conf import settings as django_settings

from ..fakes.model_server import reply
from .test_compaction import chat, fake, manual, small_window  # noqa: F401
from .test_turns import _task_runs, _until, alice_token, ask, timeline  # noqa: F401

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # On the embedded default the cache is in the process: it cannot be away.
    pytest.mark.skipif(not django_settings.REDIS_URL, reason="the cache is Redis on the scale-out layout only"),
]



@pytest.fixture
def turn_runs():
    with _task_runs("qorven.agent.turn") as runs:
        yield runs


def _said(world) -> list[tuple[str, str]]:
    return [(m.role, m.metadata.get("notice") or m.content) for m in timeline(world)]


def test_a_message_finding_its_session_busy_while_the_cache_is_away_is_answered_once_by_the_turn_holding_it(
    client, world, alice_token, model_server, drain, cache_redis, turn_runs  # noqa: F811
):
    """Redis goes away while the first question is answered; the second question's turn
    finds the session busy and comes back on the worker's timer; the turn holding the
    session answers it; each is answered once. Before, the waiting turn's task failed on
    the waiter marker's write (Redis' ConnectionError, logged as unexpected)."""
    stop, _ = cache_redis
    first = threading.Event()
    model_server.add(reply("First answer.", hold=first))
    model_server.default = reply("Second answer.")
    try:
        ask(client, alice_token, "first?")
        _until(lambda: model_server.in_flight == 1)
        stop()
        ask(client, alice_token, "second?")
        _until(lambda: len(turn_runs) >= 1)  # the second question's turn found the session busy
    finally:
        first.set()
    drain()
    assert _said(world) == [("user", "first?"), ("user", "second?"),
                            ("assistant", "First answer."), ("assistant", "Second answer.")]
    assert [m.answer_state for m in timeline(world) if m.role == "user"] == ["answered", "answered"]
    assert len(model_server.requests) == 2
    assert "FAILURE" not in turn_runs


def test_a_message_whose_session_a_dead_worker_left_held_while_the_cache_is_away_is_answered_once_its_lease_ends(
    client, world, alice_token, model_server, drain, cache_redis, turn_runs  # noqa: F811
):
    """A lease left by a worker that died (it runs out in two seconds) and Redis away:
    the question's turn waits for the session on the worker's timer and answers it once
    the lease has run out. Before, its task failed on the waiter marker's write, and the
    question stayed unanswered until the sweeper's pass after QORVEN_TURN_LEASE."""
    from datetime import timedelta

    from django.utils import timezone

    from sessions_app.models import Session

    stop, _ = cache_redis
    model_server.default = reply("Answered.")
    ask(client, alice_token, "hello?")
    drain()
    Session.objects.filter(tenant=world.tenant_a, user=world.alice).update(
        turn_owner="a-dead-worker", turn_lease_until=timezone.now() + timedelta(seconds=2))
    stop()
    ask(client, alice_token, "still there?")
    drain()
    assert _said(world) == [("user", "hello?"), ("assistant", "Answered."),
                            ("user", "still there?"), ("assistant", "Answered.")]
    assert len(model_server.requests) == 2
    assert "FAILURE" not in turn_runs and "RETRY" in turn_runs


def test_a_message_failing_transiently_while_the_cache_is_away_is_answered_on_its_come_back(
    client, world, alice_token, model_server, drain, cache_redis, turn_runs, settings  # noqa: F811
):
    """Redis away and the model's first answer a 503: the turn comes back for the
    question on the worker's timer and it is answered once. Before, marking the turn's
    come-back raised Redis' ConnectionError out of the turn."""
    from ..fakes.model_server import error

    settings.QORVEN_MODEL_RETRIES = 0
    stop, _ = cache_redis
    model_server.add(error(503, "down"))
    model_server.default = reply("Back again.")
    stop()
    ask(client, alice_token, "hello?")
    drain()
    assert [(role, said) for role, said in _said(world) if role != "system"] == [
        ("user", "hello?"), ("assistant", "Back again.")]
    assert len(model_server.requests) == 2
    assert "FAILURE" not in turn_runs


def test_a_question_to_a_qor_with_an_mcp_server_while_the_cache_is_away_is_answered_with_its_tools(
    client, world, alice_token, model_server, drain, cache_redis  # noqa: F811
):
    """The tools of a Qor's MCP server are listed on its first turn; a list that failed
    is not asked again for a while, as the cache remembers. With the cache away the list
    is asked for and the question answered with the server's tool. Before, the read of
    the list's failures raised out of the turn: the question was never answered."""
    from tenancy.models import McpServer

    from ..fakes.model_server import tool_call
    from .test_mcp import STDIO, tool_results

    McpServer.objects.create(qor=world.qor_a, name="calc", kind="stdio", command=STDIO)
    model_server.add(tool_call("mcp_calc_add", {"a": 2, "b": 3}), reply("Two and three make 5."))
    stop, _ = cache_redis
    stop()
    ask(client, alice_token, "what is 2 + 3?")
    drain()
    assert tool_results(model_server.requests[1]) == ["5"]
    assert _said(world)[-1] == ("assistant", "Two and three make 5.")


def test_replies_streamed_while_the_cache_is_away_say_so_once_in_the_log(
    client, world, alice_token, model_server, drain, cache_redis, caplog  # noqa: F811
):
    """The stream buffer (what a page refreshed mid-reply is sent) cannot be kept with the
    cache away: the log says so once, not with a traceback at each reply's end as well
    (three lines for two replies before)."""
    from qorven.runtime import streams

    stop, _ = cache_redis
    model_server.default = reply("Answered.")
    caplog.set_level(logging.WARNING, logger="qorven.runtime.streams")
    stop()
    streams._buffer_failures.succeeded()  # a run of failures an earlier test left open is over
    caplog.clear()
    ask(client, alice_token, "one?")
    drain()
    ask(client, alice_token, "two?")
    drain()
    assert [m for _, m in _said(world) if m == "Answered."] == ["Answered.", "Answered."]
    assert len([r for r in caplog.records if r.name == "qorven.runtime.streams"]) == 1


def test_a_question_that_outgrows_the_window_while_the_cache_is_away_is_answered_once(
    client, world, alice_token, drain, cache_redis, turn_runs, settings, small_window, fake, caplog  # noqa: F811
):
    """Auto mode: the exchange outgrew the window, so the summarizer is queued after the
    reply's commit, once per quiet spell (a mark in the cache). With the cache away the
    question is answered, its turn ends well and the summarizer is left to the next
    exchange over budget. Before, queueing it raised Redis' ConnectionError out of the
    reply's commit: the turn's task failed after the reply was stored."""
    from sessions_app.services.resolve import session_resolve

    from .test_compaction import FILLER, seed_history

    settings.QORVEN_SUMMARIZER_QUIET = 1.0
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    seed_history(session, 30)
    stop, _ = cache_redis
    stop()
    ask(client, alice_token, FILLER.format(i=99))
    drain()
    assert [m.answer_state for m in timeline(world)][-2] == "answered"
    assert _said(world)[-1] == ("assistant", "ok 1")
    assert turn_runs == ["SUCCESS"]


def test_the_model_starting_a_new_topic_while_the_cache_is_away_answers_and_starts_fresh(
    world, fake, model_server, drain, chat, cache_redis  # noqa: F811
):
    """new_topic keeps a mark in the cache so that calling it twice in a turn queues one
    /compact; with the cache away the recorded /compact (in the database) says so. Before,
    the mark's write raised out of the tool: the model was told the tool failed."""
    from sessions_app.models import Message

    from ..fakes.model_server import tool_call
    from .test_compaction import canonical, main_requests

    chat("remember my bike is a blue Brompton")
    old = canonical(world)
    stop, _ = cache_redis
    stop()
    fake.main += [tool_call("new_topic", {"reason": "holiday plans"}), tool_call("new_topic", {"reason": "again"}),
                  reply("Happy to plan your holiday!")]
    chat("Enough about bikes. Let's plan my holiday in Portugal.")
    results = [m["content"] for m in main_requests(model_server)[-1]["messages"]
               if m["role"] == "tool"]
    assert "fresh conversation" in results[0] and results[1] == '{"status": "already starting fresh after this answer"}'
    old.refresh_from_db()
    assert old.state == "archived" and canonical(world).pk != old.pk
    answer = Message.objects.filter(session=old, role="assistant").order_by("seq").last()
    assert answer.content == "Happy to plan your holiday!"
    assert Message.objects.filter(session=canonical(world), metadata__notice="compacted").count() == 1


def test_a_turn_whose_cache_goes_away_in_the_middle_of_a_tool_round_is_answered_once(
    client, world, alice_token, model_server, drain, cache_redis, turn_runs  # noqa: F811
):
    """Redis stops while the model holds its answer with a tool call: the tool runs, the
    model is asked again and the question answered, with the connections the turn had
    open to Redis broken under it; the turn's task ends well, nothing done twice."""
    from memory_app.models import Memory

    from ..fakes.model_server import tool_call

    stop, _ = cache_redis
    held = threading.Event()
    call = tool_call("remember", {"content": "Alice's bike is a blue Brompton", "type": "fact"})
    call.hold = held
    model_server.add(call, reply("Noted: a blue Brompton."))
    try:
        ask(client, alice_token, "remember that my bike is a blue Brompton")
        _until(lambda: model_server.in_flight == 1)
        stop()
    finally:
        held.set()
    drain()
    assert _said(world)[-1] == ("assistant", "Noted: a blue Brompton.")
    assert [m.answer_state for m in timeline(world) if m.role == "user"] == ["answered"]
    assert list(Memory.objects.filter(tenant=world.tenant_a).values_list("content", flat=True)) == [
        "Alice's bike is a blue Brompton"]
    assert len(model_server.requests) == 2
    assert turn_runs == ["SUCCESS"]


def test_a_manual_mode_compaction_due_before_a_turn_while_the_cache_is_away_is_done_and_the_question_answered(
    world, manual, fake, model_server, drain, chat, cache_redis, turn_runs  # noqa: F811
):
    """Manual mode, the conversation at its threshold: the turn compacts and rotates
    before it answers (the summarizer's calls read the routes' cooldowns, a thinking
    model's mark), with Redis away; the question, carried to the fresh chat, is answered
    once and the turn's task ends well."""
    from tenancy.trust import Trust

    from .test_compaction import canonical, kinds, seed_history

    old = canonical(world)
    seed_history(old, 12, channel="telegram")
    stop, _ = cache_redis
    stop()
    chat("remember my locker code is 2211", channel="telegram", trust=Trust.PAIRED)
    old.refresh_from_db()
    assert old.state == "archived"
    assert [(role, said) for role, said in _said(world) if role != "system"] == [
        ("user", "remember my locker code is 2211"), ("assistant", "ok 1")]
    assert kinds(model_server) == ["flush", "summary", "main"]
    assert turn_runs == ["SUCCESS"]


def test_the_summarizer_finding_the_cache_away_comes_back_and_condenses_once_it_is_back(
    world, drain, cache_redis, settings, small_window, fake  # noqa: F811
):
    """Auto mode's summarizer due on a conversation of 6 exchanges, run while Redis is away
    (its one-run-per-session lease and the waiting mark are there): it comes back on the
    worker's timer, makes no model call meanwhile, and condenses the conversation once
    Redis is back, once. Before, its first read of the cache raised Redis' ConnectionError:
    the task failed, nothing was condensed, and the range waited for the person's next
    exchange over the window."""
    import time

    from memory_app.tasks import session_summarize

    from .test_compaction import canonical, compaction_notes, seed_history

    settings.QORVEN_SUMMARIZER_QUIET = 0
    session = canonical(world)
    seed_history(session, 6)
    stop, start = cache_redis
    stop()
    with _task_runs("memory_app.summarize") as runs:
        session_summarize.delay(world.tenant_a.pk, session.pk, 8)
        _until(lambda: len(runs) >= 1)  # it found the cache away
        assert fake.calls["flush"] == 0 and fake.calls["summary"] == 0
        time.sleep(0.5)
        start()
        drain()
    session.refresh_from_db()
    assert session.compacted_through_seq == 8
    assert len(compaction_notes(session)) == 1
    assert fake.calls["flush"] == 1 and fake.calls["summary"] == 1
    assert "FAILURE" not in runs


def test_the_summarizer_whose_cache_goes_away_mid_run_keeps_what_it_condensed_and_ends_well(
    world, drain, cache_redis, settings, small_window, model_server  # noqa: F811
):
    """Redis goes away while the summarizer's model writes the summary: the summary and
    its notes are stored once and the task ends well; its lease, which it cannot give
    back, runs out by itself. Before, giving the lease back raised Redis'
    ConnectionError out of the task after the summary was stored: the task failed, and
    a catch-up's next run was never queued."""
    from memory_app.tasks import session_summarize

    from ..fakes.summarizer import FakeModel, kind_of
    from .test_compaction import canonical, compaction_notes, seed_history

    settings.QORVEN_SUMMARIZER_QUIET = 0
    session = canonical(world)
    seed_history(session, 6)
    stop, _ = cache_redis
    model = FakeModel()

    def answer(body):
        if kind_of(body) == "summary":
            stop()
        return model(body)

    model_server.default = answer
    with _task_runs("memory_app.summarize") as runs:
        session_summarize.delay(world.tenant_a.pk, session.pk, 8)
        drain()
    session.refresh_from_db()
    assert session.compacted_through_seq == 8
    assert len(compaction_notes(session)) == 1
    assert model.calls["flush"] == 1 and model.calls["summary"] == 1
    assert runs == ["SUCCESS"]
