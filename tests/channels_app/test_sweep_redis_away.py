"""A sweep while the cache (Redis) is away does all it can: what is stuck is queued
again, what is past its retention is pruned. The marks that only spare it work (a voice
note swept once per period, the prunes looked for once an hour) are skipped with one
log line. With the send gates in the cache (QORVEN_SEND_GATES=cache) a bot's gate that
cannot be read counts as held: its reply waits for the next pass. The cache is a Redis
server of the test's own, really stopped."""
from __future__ import annotations

import logging
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from channels_app.inbound import InboundMessage
from channels_app.models import InboundEvent, OutboundDelivery
from channels_app.sweep import sweep
from sessions_app.models import Message

from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from ..processes import needs_postgres_and_redis, wait_for
from .conftest import pair, replies_waiting
from .test_undelivered_reply import ON_THE_WEB as UNSEEN  # our notice that a reply did not get there
from .test_voice import voice_note_task_lost, with_transcriber

pytestmark = [pytest.mark.django_db(transaction=True), needs_postgres_and_redis]
LONG_AGO = timedelta(hours=1)


def _event(world, telegram, external_id: str, text: str, *, age: timedelta, **fields) -> InboundEvent:
    event = InboundEvent.objects.create(
        tenant=world.tenant_a, binding=telegram, external_id=external_id, sender_id="42",
        payload=InboundMessage(channel="telegram", external_id=external_id, sender_id="42", sender_name="Priya",
                               text=text, reply_target="42").model_dump(mode="json"), **fields)
    InboundEvent.objects.filter(pk=event.pk).update(created_at=timezone.now() - age)
    return event


def test_a_sweep_while_the_cache_is_away_queues_what_is_stuck_and_prunes(
    world, telegram, platform, model_server, drain, cache_redis, settings, caplog
):
    """Before, the voice note's mark raised Redis' ConnectionError part-way through the
    sweep: the inbound event behind it was never queued, nothing was pruned."""
    settings.QORVEN_INBOUND_RETENTION = "7d"
    pair(world, "telegram", "42", world.alice)
    with_transcriber(world)
    note = voice_note_task_lost(world, age=LONG_AGO)
    stuck = _event(world, telegram, "42:9", "lost in a crash", age=LONG_AGO)
    old = _event(world, telegram, "42:1", "answered long ago", age=timedelta(days=30),
                 state=InboundEvent.State.DONE)
    model_server.transcripts.append("Call the plumber tomorrow.")
    model_server.default = reply("Noted.")
    stop, _ = cache_redis
    stop()
    caplog.set_level(logging.WARNING, logger="channels_app.sweep")
    report = sweep()
    assert (report.voice_notes, report.inbound, report.events_pruned) == (1, 1, 1)
    assert not InboundEvent.objects.filter(pk=old.pk).exists()
    drain()
    note.refresh_from_db()
    stuck.refresh_from_db()
    assert (note.content, note.answer_state) == ("Call the plumber tomorrow.", "answered")
    assert stuck.state == "done"
    assert Message.objects.filter(role="user", content="lost in a crash").count() == 1
    assert len([r for r in caplog.records if r.name == "channels_app.sweep"]) == 1


def _a_reply_waiting_with_the_cache_away(world, telegram, cache_redis, settings, caplog, text: str, **delivery):
    """The send gates in the cache, a reply to Alice on Telegram waiting for its bot (its
    delivery as `delivery` says) and an event answered a month ago; then Redis stops, with
    the sweep's log caught from there. Returns that event and what starts Redis again."""
    settings.QORVEN_SEND_GATES = "cache"
    settings.QORVEN_INBOUND_RETENTION = "7d"
    sweep()  # with Redis there: an outage an earlier pass logged is over
    pair(world, "telegram", "42", world.alice)
    replies_waiting(world, telegram, [text])
    OutboundDelivery.objects.update(**delivery)
    old = _event(world, telegram, "42:1", "answered long ago", age=timedelta(days=30),
                 state=InboundEvent.State.DONE)
    stop, start = cache_redis
    stop()
    caplog.set_level(logging.WARNING, logger="channels_app.sweep")
    caplog.clear()
    return old, start


def test_with_the_send_gates_in_the_cache_a_sweep_while_it_is_away_leaves_the_reply_and_goes_on(
    world, telegram, platform, drain, cache_redis, settings, caplog
):
    """A reply waiting a minute for its bot, whose gate cannot be read with Redis away,
    counts as held: the pass goes on past it (an old event pruned) with one log line, and
    the pass after Redis is back sends it, once. Before, the gate's read raised Redis'
    ConnectionError out of the pass: nothing after the deliveries ran, nothing was pruned."""
    old, start = _a_reply_waiting_with_the_cache_away(
        world, telegram, cache_redis, settings, caplog, "sent once Redis is back",
        updated_at=timezone.now() - timedelta(minutes=1))  # past UNWOKEN_GRACE
    report = sweep()
    assert (report.deliveries, report.events_pruned) == (0, 1)
    assert not InboundEvent.objects.filter(pk=old.pk).exists()
    drain()
    assert platform.sent("sendMessage") == []
    assert len([r for r in caplog.records if r.name == "channels_app.sweep"]) == 1
    start()
    assert sweep().deliveries == 1
    drain()
    assert sweep().deliveries == 0
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["sent once Redis is back"]
    assert list(OutboundDelivery.objects.values_list("state", flat=True)) == ["sent"]


def test_with_the_send_gates_in_the_cache_a_sweep_while_it_is_away_leaves_a_cut_off_send_and_goes_on(
    world, telegram, platform, drain, cache_redis, settings, caplog
):
    """A part left `sending` by a sender that died: with its bot's gate unreadable nobody
    can tell it from a send under way, so it is left for the pass after Redis is back,
    which fails it and tells the person, once. Before, taking the gate raised Redis'
    ConnectionError out of the pass: nothing after it ran, nothing was pruned."""
    old, start = _a_reply_waiting_with_the_cache_away(
        world, telegram, cache_redis, settings, caplog, "cut off",
        state="sending", updated_at=timezone.now() - LONG_AGO)
    report = sweep()
    assert (report.interrupted_sends, report.events_pruned) == (0, 1)
    assert not InboundEvent.objects.filter(pk=old.pk).exists()
    assert list(OutboundDelivery.objects.values_list("state", flat=True)) == ["sending"]
    assert len([r for r in caplog.records if r.name == "channels_app.sweep"]) == 1
    start()
    assert sweep().interrupted_sends == 1
    drain()
    assert sweep().interrupted_sends == 0
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == [UNSEEN]
    assert dict(OutboundDelivery.objects.values_list("text", "state")) == {"cut off": "failed", UNSEEN: "sent"}


def _tried_with_the_cache_away(caplog) -> bool:
    """Whether the send task met the cache away once (it failed, or it is to come back)."""
    return any("ConnectionError" in r.getMessage() for r in caplog.records if r.name.startswith(("celery", "channels")))


def test_with_the_send_gates_in_the_cache_a_reply_queued_while_it_is_away_goes_once_it_is_back(
    world, telegram, platform, drain, cache_redis, settings, caplog
):
    """A reply waiting past the sweeper's three minutes is queued without a look at its
    bot's gate; its send task cannot take the gate with Redis away. It sends nothing then,
    and comes back until Redis is back: the reply goes once, with no pass of the sweeper
    after. Before, the gate's take raised Redis' ConnectionError out of the task, which
    failed: the reply waited for the next pass (QORVEN_SWEEP_INTERVAL)."""
    settings.QORVEN_SEND_GATES = "cache"
    pair(world, "telegram", "42", world.alice)
    replies_waiting(world, telegram, ["sent once Redis is back"])
    OutboundDelivery.objects.update(updated_at=timezone.now() - timedelta(minutes=4))  # past DELIVERY_GRACE
    stop, start = cache_redis
    stop()
    caplog.set_level(logging.INFO)
    assert sweep().deliveries == 1
    assert wait_for(lambda: _tried_with_the_cache_away(caplog), 10)
    assert platform.sent("sendMessage") == []
    assert list(OutboundDelivery.objects.values_list("state", flat=True)) == ["pending"]
    start()
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["sent once Redis is back"]
    assert sweep().deliveries == 0
    drain()
    assert len(platform.sent("sendMessage")) == 1
    assert list(OutboundDelivery.objects.values_list("state", flat=True)) == ["sent"]


def test_with_the_send_gates_in_the_cache_a_reply_whose_send_meets_it_going_away_goes_on_once_it_is_back(
    world, telegram, platform, drain, cache_redis, settings
):
    """Redis goes while Telegram holds the first of a reply's two parts, queued by the
    sweeper: the first is sent and recorded once, the second is not claimed (its gate
    cannot be renewed) and goes once Redis is back, with no notice and no pass of the
    sweeper after. Before, the renewal raised out of the task, which failed: the second
    part waited for the next pass."""
    settings.QORVEN_SEND_GATES = "cache"
    pair(world, "telegram", "42", world.alice)
    (message,) = replies_waiting(world, telegram, ["first part"])
    OutboundDelivery.objects.create(tenant=world.tenant_a, message=message, part=1, binding=telegram, target="42",
                                    text="second part")
    OutboundDelivery.objects.update(updated_at=timezone.now() - timedelta(minutes=4))  # past DELIVERY_GRACE
    stop, start = cache_redis
    platform.script(r"sendMessage", Canned(body={"ok": True, "result": {"message_id": 7}},
                                           meanwhile=lambda _: stop()))
    assert sweep().deliveries == 1
    assert wait_for(lambda: OutboundDelivery.objects.filter(part=0, state="sent").exists(), 10)
    time.sleep(0.5)  # the task meets the cache away at the second part
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["first part"]
    assert OutboundDelivery.objects.get(part=1).state == "pending"
    start()
    drain()
    assert sweep().deliveries == 0
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["first part", "second part"]
    assert list(OutboundDelivery.objects.order_by("part").values_list("state", flat=True)) == ["sent", "sent"]


def test_with_the_send_gates_in_the_cache_a_send_that_finds_it_away_for_the_sweepers_grace_leaves_the_reply_pending(
    world, telegram, platform, drain, cache_redis, settings, caplog
):
    """The send task's tries while Redis is away are bounded by the sweeper's grace
    (CACHE_AWAY_TRIES of CACHE_RETRY_DELAY): its last try sends nothing, ends well and
    leaves the reply pending — not failed, not dropped — and the sweeper's first pass
    after Redis is back sends it, once. Started at its last-but-one try (`away`, the
    task's own count), so the test waits one come-back rather than three minutes."""
    from channels_app.sweep import DELIVERY_GRACE
    from channels_app.tasks import CACHE_AWAY_TRIES, deliver_message_task
    from qorven.runtime.cache_away import CACHE_RETRY_DELAY

    from ..agent.test_turns import _task_runs

    assert CACHE_AWAY_TRIES * CACHE_RETRY_DELAY == DELIVERY_GRACE.total_seconds()  # 90 tries, three minutes
    settings.QORVEN_SEND_GATES = "cache"
    pair(world, "telegram", "42", world.alice)
    (message,) = replies_waiting(world, telegram, ["sent by the sweeper"])
    stop, start = cache_redis
    stop()
    caplog.set_level(logging.WARNING, logger="channels_app.tasks")
    with _task_runs("channels_app.deliver") as runs:
        deliver_message_task.delay(world.tenant_a.pk, message.pk, away=CACHE_AWAY_TRIES - 2)
        drain()
    assert runs == ["RETRY", "SUCCESS"]  # one come-back, then no more
    assert any("left to the sweeper" in r.getMessage() for r in caplog.records)
    assert platform.sent("sendMessage") == []
    assert list(OutboundDelivery.objects.values_list("state", flat=True)) == ["pending"]
    start()
    OutboundDelivery.objects.update(updated_at=timezone.now() - timedelta(minutes=4))  # past DELIVERY_GRACE
    assert sweep().deliveries == 1
    drain()
    assert sweep().deliveries == 0
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["sent by the sweeper"]
    assert list(OutboundDelivery.objects.values_list("state", flat=True)) == ["sent"]
