"""A platform that refuses the account itself (a bad or revoked bot token, access taken
away), not only the one message: the reply fails, and our notice that it did not get
there is not sent through that same account, where it could only fail too. It is stored
and shown on the page, its delivery failed where the admin sees why; the log says it."""
from __future__ import annotations

import logging

import pytest

from channels_app.models import OutboundDelivery
from channels_app.tasks import deliver_message_task
from sessions_app.models import Message
from sessions_app.services import message_append, session_resolve

from ..fakes.platform_server import Canned
from .conftest import pair
from .test_slack_discord_email_sms import discord, discord_key, slack  # noqa: F401 (fixtures)
from .test_undelivered_reply import ON_THE_WEB

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "Your meeting is at 3."
# Each platform's sending path, the chat (and account) a reply goes to, and how the
# platform answers a token it does not know.
PLATFORMS = {
    "telegram-401": ("telegram", "/telegram/bot111:AAA/sendMessage", "42",
                     Canned(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})),
    "telegram-404": ("telegram", "/telegram/bot111:AAA/sendMessage", "42",
                     Canned(404, {"ok": False, "error_code": 404, "description": "Not Found"})),
    "whatsapp-401": ("whatsapp", "/whatsapp/v21.0/1055/messages", "15550100", Canned(401, {"error": {
        "message": "Error validating access token: Session has expired", "type": "OAuthException", "code": 190}})),
    "slack-invalid_auth": ("slack", "/slack/api/chat.postMessage", "D0DM", Canned(200, {"ok": False,
                                                                                     "error": "invalid_auth"})),
    "slack-token_revoked": ("slack", "/slack/api/chat.postMessage", "D0DM", Canned(200, {"ok": False,
                                                                                       "error": "token_revoked"})),
    "discord-401": ("discord", "/discord/api/v10/channels/555/messages", "555",
                    Canned(401, {"message": "401: Unauthorized", "code": 0})),
    "sms-401": ("sms", "/twilio/2010-04-01/Accounts/AC123/Messages.json", "+15550002222",
                Canned(401, {"code": 20003, "message": "Authenticate", "status": 401})),
}


def refused_reply(world, binding, target: str) -> Message:
    """A reply to Alice, paired on the binding's platform as `target`, waiting to be sent."""
    pair(world, binding.kind, target, world.alice)
    channel = {"slack": "slack_dm", "discord": "discord_dm"}.get(binding.kind, binding.kind)
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel=channel, user=world.alice,
                              thread_id=target if channel in ("sms", "email") else "")  # a session of its own
    question = message_append(session=session, role="user", content="when is my meeting?", channel=channel,
                              metadata={"binding": binding.pk, "reply_target": target, "sender_id": target}).message
    answer = message_append(session=session, role="assistant", content=ANSWER, channel=channel,
                            metadata={"reply_to": question.seq}, notify=False).message
    OutboundDelivery.objects.create(tenant=world.tenant_a, message=answer, part=0, binding=binding, target=target,
                                    text=ANSWER)
    return answer


@pytest.fixture
def binding(request, world, telegram, whatsapp, sms, slack, discord):  # noqa: F811
    return {"telegram": telegram, "whatsapp": whatsapp, "sms": sms, "slack": slack, "discord": discord}[
        PLATFORMS[request.param][0]]


@pytest.mark.parametrize("binding, refusal", [(name, name) for name in PLATFORMS], indirect=["binding"],
                         ids=list(PLATFORMS))
def test_a_reply_refused_for_the_account_itself_is_not_followed_by_a_notice_sent_through_it(
    world, binding, platform, drain, caplog, refusal
):
    _, path, target, answered = PLATFORMS[refusal]
    platform.default(path, answered)
    answer = refused_reply(world, binding, target)
    with caplog.at_level(logging.INFO, logger="channels_app"):
        deliver_message_task.delay(world.tenant_a.pk, answer.pk)
        drain()
    assert len(platform.sent(path)) == 1  # the reply's send, and no other
    (notice,) = Message.objects.filter(role="system", metadata__notice="reply_undelivered")
    assert notice.content.startswith("My last reply may not have reached you.")
    answer_part, notice_part = OutboundDelivery.objects.order_by("pk")
    assert (answer_part.state, notice_part.state) == ("failed", "failed")
    assert notice_part.attempts == 0 and "not sent" in notice_part.last_error
    assert f"{binding.kind} refused the account" in notice_part.last_error  # for the admin
    assert any("refused the account" in r.getMessage() and "not sent" in r.getMessage() for r in caplog.records)


def test_a_refusal_of_the_one_chat_still_gets_the_notice_tried(world, telegram, platform, drain):
    """Telegram's 403 is the person's doing (they blocked the bot, it left the group), not
    the account's: the bot can still send elsewhere, so the notice is tried as before."""
    path = "/telegram/bot111:AAA/sendMessage"
    platform.default(path, Canned(403, {"ok": False, "error_code": 403,
                                        "description": "Forbidden: bot was blocked by the user"}))
    answer = refused_reply(world, telegram, "42")
    deliver_message_task.delay(world.tenant_a.pk, answer.pk)
    drain()
    assert [s.json["text"] for s in platform.sent(path)] == [ANSWER, ON_THE_WEB]


def test_an_email_reply_whose_mail_server_refuses_our_login_is_not_followed_by_a_notice_sent_the_same_way(
    world, email, settings, drain  # noqa: F811
):
    """The mail server turns down the binding's login for good (535): the notice would
    log in the same way."""
    from ..fakes.smtp_server import smtp_server

    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = "aria@acme.example", "a-stale-password"
    with smtp_server(AUTH=b"535 5.7.8 Authentication credentials invalid\r\n") as port:
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
        answer = refused_reply(world, email, "\x1f".join(["priya@example.com", "<m1@example.com>", "Re: Trip plans"]))
        deliver_message_task.delay(world.tenant_a.pk, answer.pk)
        drain()
    answer_part, notice_part = OutboundDelivery.objects.order_by("pk")
    assert answer_part.state == "failed" and answer_part.last_error.startswith("email refused the account itself")
    assert (notice_part.state, notice_part.attempts) == ("failed", 0)
    assert "not sent" in notice_part.last_error


def test_once_the_account_is_refused_the_rest_of_the_reply_and_the_replies_waiting_are_failed_unsent(
    world, telegram, platform, drain
):
    """The platform refused the bot's token for the first part: the rest of that reply,
    and the replies waiting for the bot, would be refused the same way, one request each.
    They are failed at once, with the reason, for the admin and the page. The token fixed
    in the admin, the next reply goes out at once."""
    from .conftest import replies_waiting

    path = "/telegram/bot111:AAA/sendMessage"
    platform.default(path, Canned(401, {"ok": False, "error_code": 401, "description": "Unauthorized"}))
    pair(world, "telegram", "42", world.alice)
    first, second = replies_waiting(world, telegram, [ANSWER, "Bring the slides."])
    for part in (1, 2):
        OutboundDelivery.objects.create(tenant=world.tenant_a, message=first, part=part, binding=telegram,
                                        target="42", text=f"part {part}")
    deliver_message_task.delay(world.tenant_a.pk, first.pk)
    drain()
    assert [s.json["text"] for s in platform.sent(path)] == [ANSWER]  # one request, and no other
    parts = list(OutboundDelivery.objects.filter(message__in=[first, second]).order_by("message_id", "part"))
    assert [(p.state, p.attempts) for p in parts] == [("failed", 1), ("failed", 0), ("failed", 0), ("failed", 0)]
    for unsent in parts[1:]:  # why, for the admin
        assert unsent.last_error.startswith("not sent:") and "telegram refused the account itself" in unsent.last_error
        assert "401" in unsent.last_error
    assert not OutboundDelivery.objects.filter(state__in=["pending", "sending"]).exists()
    notices = OutboundDelivery.objects.filter(message__metadata__notice="reply_undelivered")
    assert notices.count() == 2  # one for each reply, on the page
    assert all(n.state == "failed" and n.last_error.startswith("not sent") for n in notices)

    # The token fixed in the admin: nothing of the refusal is held against the binding.
    telegram.credentials = {**telegram.credentials, "token": "111:BBB"}
    telegram.save(update_fields=["credentials"])
    platform.default("/telegram/bot111:BBB/sendMessage", Canned(body={"ok": True, "result": {"message_id": 9}}))
    (later,) = replies_waiting(world, telegram, ["See you then."])
    deliver_message_task.delay(world.tenant_a.pk, later.pk)
    drain()
    assert [s.json["text"] for s in platform.sent("/telegram/bot111:BBB/sendMessage")] == ["See you then."]
    assert OutboundDelivery.objects.get(message=later).state == "sent"
