"""A reply sent to a platform in one part that never gets there (refused for good, out of
retries, cut off mid-send, reported undelivered later): the person on the platform is told
once, in our words, and where they can read it when they have the web page or the
terminal. The notice failing in turn is the end of it: nothing more is said or tried."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from channels_app.models import Identity, OutboundDelivery
from channels_app.sweep import sweep
from channels_app.tasks import deliver_message_task
from sessions_app.models import Message
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.models import Membership
from tenancy.services import api_token_create, tenant_suspend

from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from .conftest import pair
from .payloads import post_telegram, post_whatsapp, telegram_update, whatsapp_body
from .test_whatsapp_statuses import failed, status_body

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "Your meeting is at 3."
MISSING = "My last reply may not have reached you."
ON_THE_WEB = f"{MISSING} You can read it in our chat on the web page. Ask me to send it again if you need it."
PLATFORM_ONLY = f"{MISSING} Ask me to send it again if you need it."
OK = Canned(body={"ok": True, "result": {"message_id": 7}})
REFUSAL = "Bad Request: message text is invalid: secret-internal-detail"
REFUSED = Canned(status=400, body={"ok": False, "error_code": 400, "description": REFUSAL})
SENT = r"/telegram/bot111:AAA/sendMessage"
# A WhatsApp failure that leaves the chat open to our notice (a limit that passes, not a
# closed 24-hour window or a number that cannot receive).
UNDELIVERABLE = {"code": 131048, "title": "Spam rate limit hit"}


def texts_sent(platform) -> list[str]:
    return [s.json["text"] for s in platform.sent(SENT)]


def asked(client, world, platform, model_server, drain, *, user=None) -> Message:
    """`user` (Alice unless given), paired as Telegram sender 42, asks; the model answers
    ANSWER, one Telegram message; everything queued has run."""
    pair(world, "telegram", "42", user or world.alice)
    platform.default(SENT, OK)
    model_server.add(reply(ANSWER))
    assert post_telegram(client, telegram_update("when is my meeting?")).status_code == 200
    drain()
    return Message.objects.get(role="assistant")


def notices() -> list[Message]:
    return list(Message.objects.filter(role="system", metadata__notice="reply_undelivered").order_by("pk"))


def states(message: Message) -> list[str]:
    return list(OutboundDelivery.objects.filter(message=message).order_by("part").values_list("state", flat=True))


def test_a_one_part_reply_the_platform_refuses_for_good_is_followed_by_one_notice_of_ours(
    client, world, telegram, platform, model_server, drain
):
    platform.script(SENT, REFUSED)
    answer = asked(client, world, platform, model_server, drain)
    assert states(answer) == ["failed"]
    assert texts_sent(platform) == [ANSWER, ON_THE_WEB]
    (notice,) = notices()
    assert (notice.content, notice.channel, notice.seq) == (ON_THE_WEB, "telegram", answer.seq + 1)
    assert states(notice) == ["sent"]
    assert REFUSAL not in notice.content

    # Run again (a task delivered twice, a sweep after a restart): nothing more is said.
    deliver_message_task.delay(world.tenant_a.pk, answer.pk)
    sweep(restart=True)
    drain()
    assert texts_sent(platform) == [ANSWER, ON_THE_WEB]
    assert len(notices()) == 1


def test_a_person_only_on_the_platform_is_not_sent_to_a_web_page_they_cannot_open(
    client, world, telegram, platform, model_server, drain
):
    priya = get_user_model().objects.create(username="telegram-priya", first_name="Priya")
    priya.set_unusable_password()
    priya.save(update_fields=["password"])
    Membership.objects.create(tenant=world.tenant_a, user=priya)
    platform.script(SENT, REFUSED)
    asked(client, world, platform, model_server, drain, user=priya)
    assert texts_sent(platform) == [ANSWER, PLATFORM_ONLY]


def test_a_person_with_a_terminal_token_is_told_to_read_it_there_and_the_page_address_is_given_when_known(
    client, world, telegram, platform, model_server, drain, settings
):
    priya = get_user_model().objects.create(username="telegram-priya", first_name="Priya")
    priya.set_unusable_password()
    priya.save(update_fields=["password"])
    Membership.objects.create(tenant=world.tenant_a, user=priya)
    api_token_create(tenant=world.tenant_a, user=priya)
    platform.script(SENT, REFUSED)
    asked(client, world, platform, model_server, drain, user=priya)
    assert texts_sent(platform)[-1] == (f"{MISSING} You can read it in our chat in the terminal (qorven chat). "
                                        "Ask me to send it again if you need it.")

    # Once she can sign in on the web page, that is where; its address when it is known.
    settings.QORVEN_PUBLIC_URL, settings.QORVEN_PUBLIC_URL_GIVEN = "https://qorven.example/q", True
    priya.set_password("a-password-for-the-web")
    priya.save(update_fields=["password"])
    platform.script(SENT, REFUSED)
    model_server.add(reply("Bring the slides."))
    assert post_telegram(client, telegram_update("anything else?", message_id=2)).status_code == 200
    drain()
    assert texts_sent(platform)[-1] == (
        f"{MISSING} You can read it in our chat on the web page (https://qorven.example/q/chat/aria/). "
        "Ask me to send it again if you need it.")


def test_a_one_part_reply_out_of_retries_is_followed_by_the_notice(
    client, world, telegram, platform, model_server, drain, settings
):
    settings.QORVEN_SEND_RETRIES = 1
    settings.QORVEN_SEND_BACKOFF = 0.05
    down = Canned(status=502, body={"ok": False, "description": "Bad Gateway"})
    platform.script(SENT, down, down)
    answer = asked(client, world, platform, model_server, drain)
    assert states(answer) == ["failed"]
    assert texts_sent(platform) == [ANSWER, ANSWER, ON_THE_WEB]


def test_when_the_platform_refuses_the_notice_too_nothing_more_is_said_or_tried(
    client, world, telegram, platform, model_server, drain
):
    platform.script(SENT, REFUSED, REFUSED, REFUSED, REFUSED)
    answer = asked(client, world, platform, model_server, drain)
    (notice,) = notices()
    assert states(answer) == states(notice) == ["failed"]
    assert texts_sent(platform) == [ANSWER, ON_THE_WEB]

    deliver_message_task.delay(world.tenant_a.pk, notice.pk)
    sweep(restart=True)
    drain()
    assert texts_sent(platform) == [ANSWER, ON_THE_WEB]
    assert len(notices()) == 1


def test_when_the_platform_stays_down_the_notice_fails_once_after_its_own_retries_and_that_is_all(
    client, world, telegram, platform, model_server, drain, settings
):
    settings.QORVEN_SEND_RETRIES = 1
    settings.QORVEN_SEND_BACKOFF = 0.05
    platform.script(SENT, *[Canned(status=503, body={"ok": False, "description": "down"})] * 10)
    answer = asked(client, world, platform, model_server, drain)
    (notice,) = notices()
    assert states(answer) == states(notice) == ["failed"]
    assert texts_sent(platform) == [ANSWER, ANSWER, ON_THE_WEB, ON_THE_WEB]
    sweep(restart=True)
    drain()
    assert len(platform.sent(SENT)) == 4


def cut_off(world, telegram, platform) -> Message:
    """A one-part reply whose send was cut off by a worker that died (its row says
    `sending`, nobody holds the bot)."""
    pair(world, "telegram", "42", world.alice)
    platform.default(SENT, OK)
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    question = message_append(session=session, role="user", content="when is my meeting?", channel="telegram",
                              metadata={"binding": telegram.pk, "reply_target": "42", "sender_id": "42"}).message
    answer = message_append(session=session, role="assistant", content=ANSWER, channel="telegram",
                            metadata={"reply_to": question.seq}, notify=False).message
    OutboundDelivery.objects.create(tenant=world.tenant_a, message=answer, part=0, binding=telegram,
                                    target="42", text=ANSWER, state="sending")
    return answer


def test_a_one_part_reply_cut_off_mid_send_is_followed_by_the_notice_at_the_next_sweep(
    world, telegram, platform, drain
):
    answer = cut_off(world, telegram, platform)
    assert sweep().interrupted_sends == 1
    drain()
    assert states(answer) == ["failed"]
    assert texts_sent(platform) == [ON_THE_WEB]


@pytest.mark.parametrize("waited", [timedelta(0), timedelta(minutes=10)], ids=["just-now", "long-ago"])
def test_our_notice_of_a_reply_cut_off_mid_send_goes_after_an_older_reply_still_waiting_for_the_bot(
    world, telegram, platform, drain, waited
):
    """An older reply waited for the bot while the reply after it was being sent, and that
    send's worker died: the sweep fails the part cut off, and the person gets the older
    reply first, then our notice (which is about the reply after it). The older reply was
    left just now (the sweep leaves it to the send that held the bot, which is the
    notice's) or long ago (the sweep queues it too, after the notice)."""
    pair(world, "telegram", "42", world.alice)
    platform.default(SENT, OK)
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    question = message_append(session=session, role="user", content="when is my meeting?", channel="telegram",
                              metadata={"binding": telegram.pk, "reply_target": "42", "sender_id": "42"}).message
    older, answer = (message_append(session=session, role="assistant", content=text, channel="telegram",
                                    metadata={"reply_to": question.seq}, notify=False).message
                     for text in ("Bring the slides.", ANSWER))
    for message, state in ((older, "pending"), (answer, "sending")):
        OutboundDelivery.objects.create(tenant=world.tenant_a, message=message, part=0, binding=telegram,
                                        target="42", text=message.content, state=state)
    OutboundDelivery.objects.update(updated_at=timezone.now() - waited)
    assert sweep().interrupted_sends == 1
    drain()
    assert texts_sent(platform) == ["Bring the slides.", ON_THE_WEB]
    assert (states(older), states(answer), states(notices()[0])) == (["sent"], ["failed"], ["sent"])


def test_a_reply_backing_off_holds_up_neither_the_replies_after_it_nor_their_order(
    world, telegram, platform, drain, settings
):
    """An older reply's first part failed for now and waits for its retry; a reply after it
    waited for the bot meanwhile. The next reply written goes out after that waiting one,
    not before it: the one backing off is passed over as a whole (the rest of its parts
    waits for its retry too), and the waiting one is not left for that retry."""
    from channels_app.sending import RetryLater, deliver_message

    settings.QORVEN_SEND_BACKOFF = 600  # its retry comes long after this test
    pair(world, "telegram", "42", world.alice)
    platform.script(SENT, Canned(status=500, body={"ok": False, "error_code": 500, "description": "down"}))
    platform.default(SENT, OK)
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)

    def written(*parts: str) -> Message:
        message = message_append(session=session, role="assistant", content=" ".join(parts), channel="telegram",
                                 notify=False).message
        for index, text in enumerate(parts):
            OutboundDelivery.objects.create(tenant=world.tenant_a, message=message, part=index, binding=telegram,
                                            target="42", text=text)
        return message

    backing_off = written("Part one.", "Part two.")
    with pytest.raises(RetryLater):
        deliver_message(tenant_id=world.tenant_a.pk, message_id=backing_off.pk, worker="w")
    waiting = written("Bring the slides.")  # found the bot busy: no task of its own
    newest = written("See you at 3.")
    deliver_message_task.delay(world.tenant_a.pk, newest.pk)
    drain()
    assert texts_sent(platform) == ["Part one.", "Bring the slides.", "See you at 3."]
    assert (states(backing_off), states(waiting), states(newest)) == (["pending", "pending"], ["sent"], ["sent"])


def test_a_reply_cut_off_mid_send_holds_up_neither_the_replies_after_it_nor_their_order(
    world, telegram, platform, drain
):
    """An older reply's first part was cut off mid-send (its worker died; the sweeper fails
    it later), and a reply after it waited for the bot. The next reply written goes out
    after the waiting one: the one cut off is passed over, not taken for the last waiting."""
    pair(world, "telegram", "42", world.alice)
    platform.default(SENT, OK)
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    rows = []
    for parts in (("Part one.", "Part two."), ("Bring the slides.",), ("See you at 3.",)):
        message = message_append(session=session, role="assistant", content=" ".join(parts), channel="telegram",
                                 notify=False).message
        for index, text in enumerate(parts):
            OutboundDelivery.objects.create(tenant=world.tenant_a, message=message, part=index, binding=telegram,
                                            target="42", text=text)
        rows.append(message)
    cut_off, waiting, newest = rows
    OutboundDelivery.objects.filter(message=cut_off, part=0).update(state=OutboundDelivery.State.SENDING)
    deliver_message_task.delay(world.tenant_a.pk, newest.pk)
    drain()
    assert texts_sent(platform) == ["Bring the slides.", "See you at 3."]
    assert (states(waiting), states(newest)) == (["sent"], ["sent"])


def test_the_replies_after_one_cut_off_mid_send_go_with_the_send_holding_the_bot(world, telegram, platform, drain):
    """An older reply was cut off mid-send (its worker died; the sweep fails that part
    later). The send holding the bot after it goes on with the reply waiting behind it,
    rather than stopping at the one cut off and leaving the rest for the sweep."""
    pair(world, "telegram", "42", world.alice)
    pair(world, "telegram", "43", world.bob)
    platform.default(SENT, OK)
    rows = []
    for user, target, parts in ((world.alice, "42", ("Part one.", "Part two.")), (world.bob, "43", ("For Bob.",)),
                                (world.alice, "42", ("Bring the slides.",))):
        session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=user)
        message = message_append(session=session, role="assistant", content=" ".join(parts), channel="telegram",
                                 notify=False).message
        for index, text in enumerate(parts):
            OutboundDelivery.objects.create(tenant=world.tenant_a, message=message, part=index, binding=telegram,
                                            target=target, text=text)
        rows.append(message)
    cut_off, sending, waiting = rows
    OutboundDelivery.objects.filter(message=cut_off, part=0).update(state=OutboundDelivery.State.SENDING)
    deliver_message_task.delay(world.tenant_a.pk, sending.pk)
    drain()
    assert texts_sent(platform) == ["For Bob.", "Bring the slides."]
    assert states(waiting) == ["sent"]
    assert states(cut_off) == ["sending", "pending"]  # the sweep's: it fails the part cut off, then sends the rest


def test_a_chat_whose_pairing_ended_is_told_nothing(world, telegram, platform, drain):
    answer = cut_off(world, telegram, platform)
    Identity.objects.filter(tenant=world.tenant_a, channel="telegram", external_id="42").update(
        approval=Identity.Approval.DENIED)
    sweep()
    drain()
    assert states(answer) == ["failed"]
    assert (texts_sent(platform), notices()) == ([], [])


def test_a_suspended_workspace_is_told_nothing(world, telegram, platform, drain):
    answer = cut_off(world, telegram, platform)
    tenant_suspend(tenant=world.tenant_a)
    sweep()
    drain()
    assert states(answer) == ["failed"]
    assert (texts_sent(platform), notices()) == ([], [])


def test_a_one_part_reply_whatsapp_reports_undelivered_later_is_followed_by_the_notice_once(
    client, world, whatsapp, platform, model_server, drain
):
    pair(world, "whatsapp", "15550100", world.alice)
    sent = r"/whatsapp/.*/messages$"
    platform.script(sent, *[Canned(body={"messaging_product": "whatsapp", "messages": [{"id": f"wamid.OUT{n}"}]})
                            for n in (1, 2)])
    model_server.add(reply(ANSWER))
    assert post_whatsapp(client, whatsapp_body("when is my meeting?")).status_code == 200
    drain()
    assert post_whatsapp(client, status_body(failed("wamid.OUT1", **UNDELIVERABLE))).status_code == 200
    drain()
    assert [s.json["text"]["body"] for s in platform.sent(sent)] == [ANSWER, ON_THE_WEB]

    # The notice reported undelivered in turn, and the report repeated: nothing more.
    assert post_whatsapp(client, status_body(failed("wamid.OUT2", **UNDELIVERABLE),
                                             failed("wamid.OUT1", **UNDELIVERABLE))).status_code == 200
    drain()
    assert len(platform.sent(sent)) == 2
    assert len(notices()) == 1


def test_a_reply_whatsapp_reports_outside_the_24_hour_window_is_followed_by_a_notice_stored_not_sent(
    client, world, whatsapp, platform, model_server, drain
):
    """Outside the person's 24-hour window (131047) nothing but a template reaches them,
    our notice no more than the reply: it is stored, the page shows it, and not sent."""
    pair(world, "whatsapp", "15550100", world.alice)
    sent = r"/whatsapp/.*/messages$"
    platform.default(sent, Canned(body={"messaging_product": "whatsapp", "messages": [{"id": "wamid.OUT1"}]}))
    model_server.add(reply(ANSWER))
    assert post_whatsapp(client, whatsapp_body("when is my meeting?")).status_code == 200
    drain()
    assert post_whatsapp(client, status_body(failed("wamid.OUT1"))).status_code == 200
    drain()
    assert [s.json["text"]["body"] for s in platform.sent(sent)] == [ANSWER]
    (notice,) = notices()
    assert notice.content == ON_THE_WEB
    (part,) = OutboundDelivery.objects.filter(message=notice)
    assert (part.state, part.attempts) == ("failed", 0)
    assert part.last_error.startswith("not sent") and "whatsapp refused this chat" in part.last_error


def test_replies_that_fail_while_our_notice_to_that_chat_still_waits_are_covered_by_it(
    world, telegram, platform, drain
):
    """Two replies waiting for the bot are refused in turn: the person is told once, not
    once per reply, while that notice has not gone out yet."""
    from .conftest import replies_waiting

    pair(world, "telegram", "42", world.alice)
    platform.default(SENT, OK)
    platform.script(SENT, REFUSED, REFUSED)
    first, second = replies_waiting(world, telegram, ["Your meeting is at 3.", "Bring the slides."])
    deliver_message_task.delay(world.tenant_a.pk, first.pk)
    drain()
    assert states(first) == states(second) == ["failed"]
    assert texts_sent(platform) == ["Your meeting is at 3.", "Bring the slides.", ON_THE_WEB]
    assert len(notices()) == 1


def test_a_commands_answer_the_platform_refuses_is_told_of_like_a_reply_and_that_is_all(
    client, world, telegram, platform, drain
):
    """Only our notice that a reply did not get there is never told of (it would call for
    another): a command's answer that never arrives leaves the person as unanswered as a
    reply does, so the notice follows it — once, and nothing follows the notice."""
    pair(world, "telegram", "42", world.alice)
    platform.default(SENT, REFUSED)
    assert post_telegram(client, telegram_update("/status")).status_code == 200
    drain()
    sent = texts_sent(platform)
    assert len(sent) == 2 and sent[0].startswith("Qor:") and sent[1] == ON_THE_WEB
    (notice,) = notices()
    assert states(notice) == ["failed"]
