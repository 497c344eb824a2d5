"""The sweeper finds in the database what a dead worker left behind and queues it again:
unanswered messages of sessions nobody holds, inbound events never processed, replies
never sent. A send cut off mid-way is failed, never sent twice."""
from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from channels_app.inbound import InboundMessage
from channels_app.models import InboundEvent, OutboundDelivery
from channels_app.sweep import sweep, unplanned_replies
from qorven.agent.gateway import inbound_accept
from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

from ..fakes.model_server import reply
from ..query_plans import query_plan
from ..sessions_app.older_versions import said_before, state_at
from .conftest import pair, replies_waiting
from .test_undelivered_reply import ON_THE_WEB as UNSEEN  # our notice that a reply did not get there

pytestmark = pytest.mark.django_db(transaction=True)
LONG_AGO = timedelta(minutes=10)


def orphaned_message(world, content: str, *, lease_until=None) -> Message:
    """A message stored by a request whose turn died with its worker."""
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message = message_append(session=session, role="user", content=content, channel="web", sender_name="Alice",
                             metadata={"trust": "owner"}, awaits_answer=True).message
    Message.objects.filter(pk=message.pk).update(created_at=timezone.now() - LONG_AGO)
    Session.objects.filter(pk=session.pk).update(turn_owner="dead-worker" if lease_until else "",
                                                 turn_lease_until=lease_until)
    return message


def test_a_message_whose_turn_died_is_answered_once_its_sessions_lease_runs_out(world, model_server, drain):
    model_server.default = reply("Here after all.")
    held = orphaned_message(world, "are you there?", lease_until=timezone.now() + timedelta(seconds=60))
    assert sweep().turns == 0  # a live lease: its turn may still be running
    Session.objects.filter(pk=held.session_id).update(turn_lease_until=timezone.now() - timedelta(seconds=1))
    assert sweep().turns == 1
    drain()
    held.refresh_from_db()
    assert held.answer_state == "answered"
    answers = Message.objects.filter(session_id=held.session_id, role="assistant")
    assert [(m.content, m.metadata["reply_to"]) for m in answers] == [("Here after all.", held.seq)]
    assert sweep().turns == 0  # nothing left


def test_a_fresh_message_whose_turn_died_is_taken_over_once_the_lease_runs_out_not_after_the_grace(
    world, model_server, drain
):
    """A worker killed mid-reply a few seconds after the message came: its lease (5 s, as
    set) ran out, yet the sweeper waited until the message was 30 s old."""
    model_server.default = reply("Back again.")
    held = orphaned_message(world, "still there?", lease_until=timezone.now() - timedelta(seconds=1))
    Message.objects.filter(pk=held.pk).update(created_at=timezone.now() - timedelta(seconds=6))
    assert sweep().turns == 1
    drain()
    held.refresh_from_db()
    assert held.answer_state == "answered"


def test_a_fresh_message_is_left_to_the_turn_queued_for_it(world, model_server, drain):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    model_server.default = reply("ok")
    inbound_accept(session=session, content="hi", channel="web", sender_name="Alice", trust="owner")
    assert sweep().turns == 0
    drain()


def test_an_inbound_event_never_processed_is_processed(world, telegram, platform, model_server, drain):
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("Got it.")
    event = InboundEvent.objects.create(
        tenant=world.tenant_a, binding=telegram, external_id="42:9", sender_id="42",
        payload=InboundMessage(channel="telegram", external_id="42:9", sender_id="42", sender_name="Priya",
                               text="lost in a crash", reply_target="42").model_dump(mode="json"),
    )
    InboundEvent.objects.filter(pk=event.pk).update(created_at=timezone.now() - LONG_AGO)
    assert sweep().inbound == 1
    drain()
    event.refresh_from_db()
    assert event.state == "done"
    assert Message.objects.filter(role="user", content="lost in a crash").count() == 1
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["Got it."]


def test_a_reply_never_sent_is_sent_and_one_cut_off_mid_send_is_failed_not_sent_again(
    world, telegram, platform, drain
):
    pair(world, "telegram", "42", world.alice)
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    question = message_append(session=session, role="user", content="hi", channel="telegram",
                              metadata={"binding": telegram.pk, "reply_target": "42"}).message
    replies = [
        message_append(session=session, role="assistant", content=text, channel="telegram",
                       metadata={"reply_to": question.seq}, notify=False).message
        for text in ("never sent", "cut off")
    ]
    for message, state in zip(replies, ["pending", "sending"], strict=True):
        OutboundDelivery.objects.create(tenant=world.tenant_a, message=message, part=0, binding=telegram,
                                        target="42", text=message.content, state=state)
    OutboundDelivery.objects.update(updated_at=timezone.now() - LONG_AGO)
    assert sweep().interrupted_sends == 1
    drain()
    # The reply never sent, then our notice that the one cut off may not have got there.
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["never sent", UNSEEN]
    states = dict(OutboundDelivery.objects.values_list("text", "state"))
    assert states == {"never sent": "sent", "cut off": "failed", UNSEEN: "sent"}
    assert "may or may not have been delivered" in OutboundDelivery.objects.get(text="cut off").last_error


def test_replies_left_for_one_binding_are_swept_one_at_a_time_and_all_sent_in_order(world, telegram, platform, drain):
    pair(world, "telegram", "42", world.alice)
    texts = [f"left {n}" for n in range(5)]
    replies_waiting(world, telegram, texts)
    OutboundDelivery.objects.update(updated_at=timezone.now() - LONG_AGO)
    assert sweep().deliveries == 1  # the oldest; its send goes on with the others
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == texts
    assert set(OutboundDelivery.objects.values_list("state", flat=True)) == {"sent"}


def test_a_server_starting_again_takes_what_its_last_run_left_at_once(world, telegram, platform, model_server, drain):
    """The embedded default's tasks died with the server that queued them: on its next
    start nothing waits out the grace period meant for tasks still queued elsewhere."""
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("Back.")
    InboundEvent.objects.create(
        tenant=world.tenant_a, binding=telegram, external_id="42:10", sender_id="42",
        payload=InboundMessage(channel="telegram", external_id="42:10", sender_id="42", sender_name="Priya",
                               text="accepted just before the restart", reply_target="42").model_dump(mode="json"),
    )
    assert sweep().inbound == 0  # fresh: its task may still be queued
    assert sweep(restart=True).inbound == 1
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["Back."]


@pytest.mark.parametrize("backing_off", [2, 9])
def test_a_send_ending_wakes_the_oldest_reply_due_passing_over_those_backing_off(
    world, telegram, platform, drain, backing_off
):
    from channels_app.tasks import deliver_message_task

    pair(world, "telegram", "42", world.alice)
    (sending,) = replies_waiting(world, telegram, ["sent now"])
    later = timezone.now() + timedelta(minutes=10)
    replies_waiting(world, telegram, [f"backing off {n}" for n in range(backing_off)], not_before=later)  # retries scheduled
    replies_waiting(world, telegram, ["due"])
    deliver_message_task.delay(world.tenant_a.pk, sending.pk)
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["sent now", "due"]
    assert OutboundDelivery.objects.filter(state="pending").count() == backing_off


def test_questions_left_in_archived_chats_do_not_crowd_out_an_active_chats(world, model_server, drain, monkeypatch):
    """The sweep looked at the first BATCH sessions with a waiting message, archived ones
    included, and only then kept the active ones: enough archived chats holding a
    question (a chat cleared or compacted while one waited) left an active chat's message
    unanswered for every sweep."""
    from channels_app import sweep as sweeper

    monkeypatch.setattr(sweeper, "BATCH", 3)  # as if hundreds of archived chats held one
    model_server.default = reply("Answered.")
    waiting = orphaned_message(world, "and this one?")
    for n in range(5):  # Bob's chats, each archived with a question in it, after Alice's
        session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.bob)
        message_append(session=session, role="user", content=f"old question {n}", channel="web",
                       awaits_answer=True, notify=False)
        Message.objects.filter(session=session).update(created_at=timezone.now() - LONG_AGO)
        Session.objects.filter(pk=session.pk).update(state=Session.State.ARCHIVED)
    assert sweep().turns == 1
    drain()
    waiting.refresh_from_db()
    assert waiting.answer_state == "answered"


def stored_as_its_process_died(**append) -> Message:
    """A message appended by a process killed as the append committed: stored, and nothing
    it was to do after the commit (delivery planning its parts among it) ever ran."""
    with transaction.atomic():
        message = message_append(**append).message
        connection.run_on_commit.clear()  # the process is gone before its commit's callbacks run
    return message


def aged(message: Message, by: timedelta) -> None:
    Message.objects.filter(pk=message.pk).update(created_at=timezone.now() - by)


def telegram_question(world, telegram):
    pair(world, "telegram", "42", world.alice)
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    question = message_append(session=session, role="user", content="hi", channel="telegram",
                              metadata={"binding": telegram.pk, "reply_target": "42", "sender_id": "42"}).message
    return session, question


def test_a_reply_whose_process_died_before_planning_it_is_sent_once_by_the_next_sweep(
    world, telegram, platform, drain
):
    """A process killed between storing a reply and planning its parts (planning runs after
    the reply commits) left a reply nothing ever sent: the person got neither it nor a
    notice. History stored beside it without telling delivery (imported, seeded) is
    never sent, however recent its times."""
    session, question = telegram_question(world, telegram)
    answer = stored_as_its_process_died(session=session, role="assistant", content="stored, never planned",
                                        channel="telegram", metadata={"reply_to": question.seq})
    for text in ("imported", "seeded"):
        message_append(session=session, role="assistant", content=text, channel="telegram", notify=False,
                       metadata={"reply_to": question.seq}, created_at=timezone.now() - timedelta(minutes=1))
    assert sweep().unplanned == 0  # stored seconds ago: its planning may still be under way
    aged(answer, timedelta(minutes=1))
    assert sweep().unplanned == 1
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["stored, never planned"]
    assert sweep().unplanned == 0 and sweep(restart=True).unplanned == 0  # planned once, sent once
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["stored, never planned"]
    assert list(OutboundDelivery.objects.values_list("message_id", "state")) == [(answer.pk, "sent")]


# A `qorven shell` that stores a reply and dies as it commits, before anything after the
# commit runs (delivery's planning among it): what a kill at that moment leaves.
DIES_AT_COMMIT = """
import os
from django.db import transaction
from sessions_app.models import Session
from sessions_app.services.append import message_append

session = Session.objects.get(pk={session})
with transaction.atomic():
    transaction.on_commit(lambda: os._exit(9))  # the first thing after the commit
    message_append(session=session, role="assistant", content={content!r}, channel="telegram",
                   metadata={{"reply_to": {reply_to}}})
"""


def test_a_reply_whose_process_was_killed_as_it_committed_is_sent_once_by_the_next_sweep(
    world, telegram, platform, drain
):
    """The same, with a process of its own that stores the reply and is gone."""
    import subprocess
    import sys
    from pathlib import Path

    from .test_terminal import ROOT

    session, question = telegram_question(world, telegram)
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
        url = f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    else:
        url = f"sqlite:///{db['NAME']}"  # the test database's own file
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CELERY_BROKER_URL")}
    env.update(DATABASE_URL=url, DJANGO_SECRET_KEY="x", QORVEN_LOG_LEVEL="WARNING")
    code = DIES_AT_COMMIT.format(session=session.pk, content="stored as its process died", reply_to=question.seq)
    qorven = str(Path(sys.executable).with_name("qorven"))
    done = subprocess.run([qorven, "shell", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 9, done.stdout + done.stderr
    (answer,) = Message.objects.filter(session=session, role="assistant")
    assert answer.content == "stored as its process died" and not OutboundDelivery.objects.exists()
    aged(answer, timedelta(minutes=1))
    assert sweep().unplanned == 1
    drain()
    assert sweep().unplanned == 0
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["stored as its process died"]


def test_history_stored_without_telling_delivery_is_never_sent_by_a_sweep(world, telegram, platform, drain):
    session, question = telegram_question(world, telegram)
    for n in range(3):
        message_append(session=session, role="assistant", content=f"imported {n}", channel="telegram",
                       notify=False, metadata={"reply_to": question.seq},
                       created_at=timezone.now() - timedelta(minutes=n + 1))
    assert sweep().unplanned == 0 and sweep(restart=True).unplanned == 0
    drain()
    assert platform.sent("sendMessage") == []
    assert not OutboundDelivery.objects.exists()


def test_a_reply_sent_and_then_pruned_is_not_sent_again(world, telegram, platform, drain, settings):
    """Its sent parts, deleted by the retention, are no sign of a reply never planned."""
    from django.core.cache import cache

    settings.QORVEN_DELIVERY_RETENTION = "1m"
    session, question = telegram_question(world, telegram)
    answer = message_append(session=session, role="assistant", content="sent minutes ago", channel="telegram",
                            metadata={"reply_to": question.seq}).message
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["sent minutes ago"]
    aged(answer, timedelta(minutes=5))
    OutboundDelivery.objects.update(sent_at=timezone.now() - timedelta(minutes=4))
    cache.delete("qorven:deliveries-pruned")  # the hourly prune is due (a worker's start may have run it)
    assert sweep().deliveries_pruned == 1
    assert sweep(restart=True).unplanned == 0
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["sent minutes ago"]
    assert not OutboundDelivery.objects.exists()


@pytest.mark.parametrize("died", [False, True], ids=["planned", "process-died"])
def test_a_reply_with_nowhere_to_go_is_planned_once_not_at_every_sweep(world, telegram, platform, drain, died):
    """Alice never wrote from Telegram: a heartbeat's result for it has no chat to go to.
    Planning that finds so is done with it, whoever planned it."""
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    append = dict(session=session, role="assistant", content="Good morning!", channel="telegram",
                  metadata={"heartbeat": 1, "heartbeat_name": "brief"})
    answer = stored_as_its_process_died(**append) if died else message_append(**append).message
    aged(answer, timedelta(minutes=1))
    assert sweep().unplanned == int(died)
    assert sweep().unplanned == 0 and sweep(restart=True).unplanned == 0
    drain()
    assert platform.sent("sendMessage") == []
    assert not OutboundDelivery.objects.exists()


def test_the_sweeps_look_for_unplanned_replies_searches_their_partial_index():
    """Every sweep asks for them: on the partial index of the few rows marked, never a scan
    of the messages table (the index's condition restated as is, not a parameter)."""
    found = query_plan(*unplanned_replies(now=timezone.now(), grace=timedelta(seconds=30)).query.sql_with_params())
    assert "message_unplanned_idx" in found, found
    assert "SCAN sessions_app_message" not in found and "Seq Scan on sessions_app_message" not in found, found


def test_replies_stored_before_the_mark_existed_are_never_sent_by_a_sweep(world, telegram, platform, drain, schema):
    """The migration that adds the mark marks no row: whether an older reply was ever
    planned cannot be told, and sending one now could repeat it."""
    session, question = telegram_question(world, telegram)
    before = state_at(schema, ("sessions_app", "0015_message_search_normalised"))
    said_before(before, session, "answered before the upgrade", role="assistant", channel="telegram")
    schema.latest()
    assert not Message.objects.filter(delivery_unplanned=True).exists()
    assert sweep(restart=True).unplanned == 0
    drain()
    assert platform.sent("sendMessage") == []
