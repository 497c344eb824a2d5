"""A reply sent to a platform in several parts, one of which never gets there: the parts
behind it are still sent, and the person is told once, in our words, that something of
the reply may be missing — never in the platform's."""
from __future__ import annotations

import threading

import pytest

from channels_app.models import OutboundDelivery
from channels_app.sweep import sweep
from sessions_app.models import Message

from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from .conftest import pair
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

PARTS = ["A" * 3000, "B" * 3000, "C" * 3000]  # three Telegram messages (4096 each at most)
NOTICE = ("Part of my last reply may not have reached you, so something above may be missing. "
          "You can read it in our chat on the web page. "
          "Ask me to send it again if you need it.")
OK = Canned(body={"ok": True, "result": {"message_id": 7}})
REFUSAL = "Bad Request: message is too long: secret-internal-detail"


def asked(client, world, platform, model_server, drain) -> Message:
    """Alice asks on Telegram and the model answers with PARTS; everything queued has run."""
    pair(world, "telegram", "42", world.alice)
    platform.default(r"sendMessage", OK)
    model_server.add(reply("\n\n".join(PARTS)))
    assert post_telegram(client, telegram_update("tell me everything")).status_code == 200
    drain()
    return Message.objects.get(role="assistant")


def texts_sent(platform) -> list[str]:
    return [s.json["text"] for s in platform.sent("sendMessage")]


def part_states(answer: Message) -> list[str]:
    return list(OutboundDelivery.objects.filter(message=answer).order_by("part").values_list("state", flat=True))


def test_a_part_the_platform_refuses_for_good_is_followed_by_the_rest_and_one_notice_of_ours(
    client, world, telegram, platform, model_server, drain
):
    platform.script(r"sendMessage", OK, Canned(status=400, body={
        "ok": False, "error_code": 400, "description": REFUSAL}))
    answer = asked(client, world, platform, model_server, drain)
    assert part_states(answer) == ["sent", "failed", "sent"]
    assert texts_sent(platform) == [PARTS[0], PARTS[1], PARTS[2], NOTICE]
    (notice,) = Message.objects.filter(role="system", metadata__notice="reply_undelivered")
    assert (notice.content, notice.channel, notice.seq) == (NOTICE, "telegram", answer.seq + 1)
    assert REFUSAL not in notice.content

    # Run again (a task delivered twice, a sweep after a restart): nothing more is said.
    from channels_app.tasks import deliver_message_task

    deliver_message_task.delay(world.tenant_a.pk, answer.pk)
    sweep(restart=True)
    drain()
    assert texts_sent(platform) == [PARTS[0], PARTS[1], PARTS[2], NOTICE]

    # The notice is ours to the person, not part of the conversation the model reads.
    model_server.add(reply("Sure."))
    assert post_telegram(client, telegram_update("again please", message_id=2)).status_code == 200
    drain()
    assert NOTICE not in str(model_server.requests[-1]["messages"])


def test_a_part_that_runs_out_of_retries_does_not_hold_back_the_parts_behind_it(
    client, world, telegram, platform, model_server, drain, settings
):
    """The part that gave up failed every part after it unsent, and nobody was told."""
    settings.QORVEN_SEND_RETRIES = 2
    settings.QORVEN_SEND_BACKOFF = 0.05
    down = Canned(status=500, body={"ok": False, "description": "Internal Server Error"})
    platform.script(r"sendMessage", OK, down, down, down)
    answer = asked(client, world, platform, model_server, drain)
    assert part_states(answer) == ["sent", "failed", "sent"]
    assert texts_sent(platform) == [PARTS[0]] + [PARTS[1]] * 3 + [PARTS[2], NOTICE]
    assert OutboundDelivery.objects.get(message=answer, part=1).attempts == 3


def cut_off_mid_send(world, telegram, platform) -> Message:
    """A three-part reply whose first part went out and whose second was being sent when
    its worker was killed (the row says `sending`, its bot is held by nobody), a moment ago."""
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve

    pair(world, "telegram", "42", world.alice)
    platform.default(r"sendMessage", OK)
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    question = message_append(session=session, role="user", content="tell me everything", channel="telegram",
                              metadata={"binding": telegram.pk, "reply_target": "42"}).message
    answer = message_append(session=session, role="assistant", content="\n\n".join(PARTS), channel="telegram",
                            metadata={"reply_to": question.seq}, notify=False).message
    for part, (text, state) in enumerate(zip(PARTS, ["sent", "sending", "pending"], strict=True)):
        OutboundDelivery.objects.create(tenant=world.tenant_a, message=answer, part=part, binding=telegram,
                                        target="42", text=text, state=state)
    return answer


def test_the_rest_of_a_reply_whose_sender_died_mid_send_goes_at_the_next_sweep_with_one_notice(
    world, telegram, platform, drain
):
    """Nobody holds the bot, so the part in `sending` is nobody's: the sweep right after
    fails it (it may have reached the platform: never sent again) and sends the rest.
    It waited until the part was 70 s old (twice QORVEN_PLATFORM_TIMEOUT and 30 s)."""
    answer = cut_off_mid_send(world, telegram, platform)
    assert sweep().interrupted_sends == 1
    drain()
    assert part_states(answer) == ["sent", "failed", "sent"]
    assert texts_sent(platform) == [PARTS[2], NOTICE]
    assert "may or may not have been delivered" in OutboundDelivery.objects.get(message=answer, part=1).last_error
    assert sweep().interrupted_sends == 0
    drain()
    assert texts_sent(platform) == [PARTS[2], NOTICE]


def test_a_part_whose_send_still_holds_its_bot_is_not_taken_for_dead(world, telegram, platform, drain):
    from channels_app.send_gate import send_gate

    answer = cut_off_mid_send(world, telegram, platform)
    holding, done = threading.Event(), threading.Event()

    def a_live_send() -> None:  # in another thread: another worker's send, under way
        from django.db import connection

        try:
            with send_gate(binding_id=telegram.pk, worker="elsewhere"):
                holding.set()
                done.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=a_live_send)
    thread.start()
    try:
        assert holding.wait(10)
        assert sweep().interrupted_sends == 0
        drain()
        assert part_states(answer) == ["sent", "sending", "pending"]
        assert texts_sent(platform) == []
    finally:
        done.set()
        thread.join(10)
