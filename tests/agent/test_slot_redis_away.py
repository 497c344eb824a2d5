"""Calls on a capped route (`max_concurrency`) waiting on their thread — a heartbeat run's,
the summarizer's — while Redis, where the route's slots live, is away: they come back for
the slots on the worker's timer, as a turn does, and neither fail nor lose their work.
The slots' Redis is a server of the test's own, stopped and started again (its data lost),
the rest of the layout as it is."""
from __future__ import annotations

import time

import pytest
from django.utils import timezone

from heartbeats_app.models import HeartbeatRun
from qorven.agent.tasks import heartbeat_run

from ..fakes.model_server import reply
from ..fakes.summarizer import FakeModel
from ..processes import redis_start
from ..ports import free_port
from .test_turns import _until

pytestmark = pytest.mark.django_db(transaction=True)


class SlotsRedis:
    """A Redis server of the test's own for the route's slots (REDIS_URL as the slots read
    it), keeping nothing on disk: stopped, its data is gone."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = redis_start(self.port)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def start(self) -> None:
        self.proc = redis_start(self.port)


@pytest.fixture
def slots_redis(settings):
    redis = SlotsRedis()
    settings.REDIS_URL = redis.url
    yield redis
    redis.stop()


def test_a_heartbeat_run_whose_capped_routes_slots_are_away_comes_back_for_them_using_no_try(
    world, pills, model_server, drain, settings, slots_redis
):
    """Redis away for a second as a beat's run calls its capped route: the run comes back
    for the slots on the worker's timer (a few seconds, as a turn does) and is answered
    once Redis is back, no try used. Before, the call counted as every slot staying busy:
    the run failed "busy" and was tried again only after QORVEN_HEARTBEAT_RETRY_DELAY
    (a minute by default; near its tick, the next at four)."""
    settings.QORVEN_HEARTBEAT_RETRY_DELAY = 60
    world.qor_a.heartbeat_max_concurrency = 1
    world.qor_a.save(update_fields=["heartbeat_max_concurrency"])
    model_server.default = reply("Pills!")
    slots_redis.stop()
    heartbeat_run.delay(world.tenant_a.pk, pills.pk, tick=timezone.now().replace(microsecond=0).isoformat())
    _until(lambda: HeartbeatRun.objects.filter(status="failed").exists())  # it found Redis away
    time.sleep(1)
    slots_redis.start()
    started = time.monotonic()
    _until(lambda: HeartbeatRun.objects.filter(status="ok").exists(), 15)
    assert time.monotonic() - started < 10
    drain()
    run = HeartbeatRun.objects.get()
    assert (run.status, run.attempts, run.output) == ("ok", 1, "Pills!")
    assert len(model_server.requests) == 1


def test_the_summarizer_whose_capped_routes_slots_are_away_comes_back_for_them_and_compacts(
    world, model_server, drain, settings, slots_redis
):
    """Auto mode's summarizer on a capped route while Redis is away for a second: it comes
    back for the slots on the worker's timer and condenses the conversation once Redis is
    back. Before, the call counted as every slot staying busy: the run ended having stored
    nothing, and the range stayed uncompacted until the person's next exchange over the
    window queued it again (none came: never)."""
    from memory_app.tasks import session_summarize

    from .test_compaction import compaction_notes

    model, session = _summarizing_on_a_capped_route(world, model_server, settings)
    slots_redis.stop()
    session_summarize.delay(world.tenant_a.pk, session.pk, 8)
    time.sleep(1.5)
    slots_redis.start()
    drain()
    session.refresh_from_db()
    assert session.compacted_through_seq == 8
    assert len(compaction_notes(session)) == 1
    assert model.calls["flush"] == 1 and model.calls["summary"] == 1


def test_compact_whose_capped_routes_slots_are_away_comes_back_for_them_and_compacts(
    client, world, model_server, drain, settings, slots_redis
):
    """/compact on a capped summarizer route while Redis is away for a second: it comes
    back for the slots on the worker's timer and compacts once Redis is back. Before, the
    person read "I could not compact this conversation" for Redis's blink."""
    from sessions_app.models import Message, Session
    from tenancy.services import api_token_create

    from .test_slot_places import _answered_exchange
    from .test_turns import ask

    world.qor_a.main_max_concurrency = 1
    world.qor_a.save(update_fields=["main_max_concurrency"])
    model_server.default = FakeModel()
    old = _answered_exchange(world)
    slots_redis.stop()
    ask(client, api_token_create(tenant=world.tenant_a, user=world.alice)[1], "/compact")
    time.sleep(1.5)
    slots_redis.start()
    drain()
    notices = list(Message.objects.filter(tenant=world.tenant_a, metadata__has_key="notice")
                   .values_list("metadata__notice", flat=True))
    assert "compact_failed" not in notices and "compacted" in notices
    assert Session.objects.get(pk=old.pk).state == "archived"


def test_the_summarizer_that_finds_every_slot_taken_comes_back_for_one_and_compacts(
    world, model_server, drain, settings, monkeypatch
):
    """Auto mode's summarizer on a capped route whose one slot stays taken for its wait
    on its thread: it comes back for a slot later and condenses the conversation once one
    is free. Before, it ended having stored nothing, the range left uncompacted until the
    person's next exchange over the window."""
    from memory_app.tasks import session_summarize
    from qorven.runtime import route_slots

    from .test_compaction import compaction_notes

    monkeypatch.setattr(route_slots, "THREAD_WAIT", 0.5)
    model, session = _summarizing_on_a_capped_route(world, model_server, settings)
    with route_slots.route_slot(base_url=model_server.base_url, cap=1, wait=5, lease=60):  # held elsewhere
        session_summarize.delay(world.tenant_a.pk, session.pk, 8)
        time.sleep(3)  # its first wait is over (the worker takes it within a second or so)
    drain()
    session.refresh_from_db()
    assert session.compacted_through_seq == 8
    assert len(compaction_notes(session)) == 1


def _summarizing_on_a_capped_route(world, model_server, settings):
    """Auto mode's summarizer due on a conversation of 6 exchanges, its route capped at 1
    (the main route's server, as the summarizer's): the fake model, and the chat."""
    from .test_compaction import canonical, seed_history

    settings.QORVEN_SUMMARIZER_QUIET = 0
    qor = world.qor_a
    qor.main_num_ctx, qor.summarizer_num_ctx, qor.main_max_concurrency = 1000, 32000, 1
    qor.save(update_fields=["main_num_ctx", "summarizer_num_ctx", "main_max_concurrency"])
    model = FakeModel()
    model_server.default = model
    session = canonical(world)
    seed_history(session, 6)
    return model, session
