"""A platform message is answered by the task that stored it: no turn task of its own, one
broker hop less between the message and its answer, and the reply is sent to the platform
by that task too (no send task of its own). A session another turn holds is left to the
turn task, which waits for it as always; a send that cannot go now goes to the send task."""
from __future__ import annotations

import time

import pytest
from celery import signals
from celery.utils.nodenames import gethostname

from django.utils import timezone

from channels_app.send_gate import binding_key, send_slot_keys
from channels_app.models import Identity, InboundEvent, OutboundDelivery
from heartbeats_app.models import DELIVER_REMINDERS
from heartbeats_app.services import heartbeat_create, heartbeat_run_now
from memory_app.services import reminder_add
from sessions_app.models import Message
from sessions_app.services.resolve import session_resolve
from sessions_app.turn_writes import turn_lease_acquire, turn_lease_release

from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from .conftest import answered_on_telegram, gates_held_elsewhere, pair, replies_waiting
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def published():
    names: list[str] = []

    def record(sender=None, **kwargs):
        names.append(sender)

    signals.before_task_publish.connect(record, weak=False)
    yield names
    signals.before_task_publish.disconnect(record)


def until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_telegram_message_is_answered_by_the_task_that_stored_it(
    client, world, telegram, platform, model_server, drain, published
):
    sent = answered_on_telegram(client, world, platform, model_server, drain, asked="book the table",
                                answer="Right away.")
    assert sent.json["text"] == "Right away."
    assert "channels_app.inbound" in published
    assert "qorven.agent.turn" not in published
    assert "channels_app.deliver" not in published
    assert OutboundDelivery.objects.get().state == "sent"


def test_a_reply_goes_out_before_the_next_message_of_the_session_is_answered(
    client, world, telegram, platform, model_server, drain
):
    """Two messages in a row: the task answering the first finds the second waiting and
    answers it too — the first reply goes to Telegram while the model answers the second
    question, not once both are answered."""
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("First answer.", delay=1.0), reply("Second answer.", delay=1.0))
    assert post_telegram(client, telegram_update("one", message_id=1)).status_code == 200
    until(lambda: len(model_server.arrivals) == 1)  # the first turn is waiting for the model
    assert post_telegram(client, telegram_update("two", message_id=2)).status_code == 200
    drain()
    sends = platform.sent("sendMessage")
    assert [s.json["text"] for s in sends] == ["First answer.", "Second answer."]
    assert len(model_server.arrivals) == 2 and sends[0].at < model_server.arrivals[1] + 0.5  # the answer takes 1 s
    # Both were answered by the task of the first (the second's turn found the session held).
    assert list(Message.objects.filter(role="assistant").order_by("seq").values_list("content", flat=True)) == [
        "First answer.", "Second answer."]


def test_a_reply_whose_send_fails_for_now_goes_to_the_send_task_and_is_sent_once(
    client, world, telegram, platform, model_server, drain, published, settings
):
    settings.QORVEN_SEND_BACKOFF = 0.05
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Right away."))
    platform.script(r"sendMessage", Canned(status=502, body={"ok": False, "description": "Bad Gateway"}))
    assert post_telegram(client, telegram_update("book the table")).status_code == 200
    drain()
    assert [s.json["text"] for s in platform.sent(r"sendMessage")] == ["Right away.", "Right away."]
    assert published.count("channels_app.deliver") == 1  # the retry, after the backoff
    assert OutboundDelivery.objects.values_list("state", "attempts").get() == ("sent", 2)


def test_a_reply_finding_no_send_slot_goes_to_the_send_task(
    client, world, telegram, platform, model_server, drain, published, settings
):
    settings.QORVEN_SEND_SLOTS = 1
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Right away."))
    (slot,) = send_slot_keys(gethostname())  # the one send slot of the embedded worker (its tasks' hostname)
    with gates_held_elsewhere(slot):
        assert post_telegram(client, telegram_update("book the table")).status_code == 200
        until(lambda: "channels_app.deliver" in published)
        assert not platform.sent(r"sendMessage")  # nothing went out while the worker had no slot
    drain()
    (sent,) = platform.sent(r"/telegram/bot111:AAA/sendMessage")
    assert sent.json["text"] == "Right away."


def test_a_reply_finding_its_bot_busy_waits_for_the_send_holding_it_and_goes_out_once(
    client, world, telegram, platform, model_server, drain, published
):
    """A bot sends one message at a time (channels_app.send_gate): a reply that finds it
    busy is left pending — no send task on a timer meanwhile — and the next send to hold
    the bot sends it too, oldest first."""
    pair(world, "telegram", "42", world.alice)
    pair(world, "telegram", "43", world.bob)
    model_server.add(reply("For Alice."), reply("For Bob."))
    with gates_held_elsewhere(binding_key(telegram.pk)):  # a send to this bot is under way
        assert post_telegram(client, telegram_update("book the table", user_id=42)).status_code == 200
        drain()
        assert not platform.sent("sendMessage")
        assert OutboundDelivery.objects.get().state == OutboundDelivery.State.PENDING
        assert "channels_app.deliver" not in published  # no send task waits on a timer for it
    # That send ended; Bob's reply is sent by its turn, Alice's older one first.
    assert post_telegram(client, telegram_update("and a taxi", user_id=43, message_id=2)).status_code == 200
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["For Alice.", "For Bob."]
    assert "channels_app.deliver" not in published  # Alice's went with Bob's send, not as a task of its own
    assert set(OutboundDelivery.objects.values_list("state", flat=True)) == {OutboundDelivery.State.SENT}


def sent_from_the_first(world, telegram, platform, drain, texts: list[str]) -> None:
    """Alice's replies waiting for the bot, a send task queued for the first of them: all
    are sent, in order."""
    from channels_app.tasks import deliver_message_task

    pair(world, "telegram", "42", world.alice)
    first, *_ = replies_waiting(world, telegram, texts)
    deliver_message_task.delay(world.tenant_a.pk, first.pk)
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == texts


def test_the_send_holding_a_bot_sends_the_replies_waiting_for_it_in_order_without_a_task_each(
    world, telegram, platform, drain, published, settings
):
    settings.QORVEN_SEND_SLOTS = 2  # one for this bot's queue, one left for everyone else
    sent_from_the_first(world, telegram, platform, drain, [f"reply {n}" for n in range(6)])
    assert published.count("channels_app.deliver") == 1  # the one queued here: the others went with it
    assert set(OutboundDelivery.objects.values_list("state", flat=True)) == {OutboundDelivery.State.SENT}


def test_a_slow_bot_is_let_go_after_a_send_and_the_next_reply_queued(
    world, telegram, platform, drain, published, monkeypatch, settings
):
    """A send holds its bot for the replies waiting only while the platform answers fast
    (channels_app.sending.DRAIN_SECONDS): one that takes longer lets go after its own
    send and queues the next, so a worker slot is not kept by a slow platform's queue."""
    from channels_app import sending

    settings.QORVEN_SEND_SLOTS = 2
    monkeypatch.setattr(sending, "DRAIN_SECONDS", 0.2)
    platform.default(r"sendMessage", Canned(delay=0.3))
    sent_from_the_first(world, telegram, platform, drain, ["slow 0", "slow 1", "slow 2"])
    assert published.count("channels_app.deliver") == 3  # each queued by the send before it, as it let go


@pytest.mark.parametrize("slots, taken_by_others", [(1, 0), (2, 1)])
def test_a_busy_bot_never_keeps_the_workers_last_free_send_slot(
    world, telegram, platform, drain, published, settings, slots, taken_by_others
):
    """The send holding a bot goes on with its waiting replies only while the worker has
    another send slot free: with none left, it lets go after its own and queues the next,
    so another tenant's reply finds a slot."""
    settings.QORVEN_SEND_SLOTS = slots
    others = send_slot_keys(gethostname())[slots - taken_by_others:]
    with gates_held_elsewhere(*others):
        sent_from_the_first(world, telegram, platform, drain, ["first", "second", "third"])
        assert published.count("channels_app.deliver") == 3  # each queued by the send before it


def test_a_session_another_turn_holds_is_left_to_the_turn_task_and_answered_once_free(
    client, world, telegram, platform, model_server, drain, published
):
    pair(world, "telegram", "42", world.alice)
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    assert turn_lease_acquire(session_id=session.pk, owner="another-turn", seconds=300)
    model_server.add(reply("Done."))
    assert post_telegram(client, telegram_update("and the taxi")).status_code == 200
    until(lambda: InboundEvent.objects.filter(state=InboundEvent.State.DONE).exists())
    until(lambda: "qorven.agent.turn" in published)  # the stored message went on to the turn task
    assert not model_server.requests
    turn_lease_release(session_id=session.pk, owner="another-turn")
    drain()
    assert [m.content for m in Message.objects.filter(role="assistant")] == ["Done."]
    assert len(platform.sent("sendMessage")) == 1
    assert "channels_app.deliver" not in published  # the turn task sent its reply itself


def test_a_heartbeats_message_to_a_platform_is_sent_by_the_heartbeats_task(
    world, telegram, platform, drain, published
):
    Identity.objects.create(tenant=world.tenant_a, channel="telegram", external_id="42", user=world.alice,
                            approval=Identity.Approval.APPROVED, reply_target="42")
    reminder_add(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, content="take the cake out",
                 due=timezone.now(), channels=["telegram"])
    beat = heartbeat_create(tenant=world.tenant_a, qor=world.qor_a, name=DELIVER_REMINDERS, cron="*/5 * * * *",
                            managed=True, system=True)
    heartbeat_run_now(heartbeat=beat)
    drain()
    (sent,) = platform.sent(r"/telegram/bot111:AAA/sendMessage")
    assert sent.json["text"] == "Reminder: take the cake out"
    assert "heartbeats_app.run" in published
    assert "channels_app.deliver" not in published
