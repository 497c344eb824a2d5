"""A platform that refuses the account itself (a bad or revoked bot token, access taken
away), or the one chat (the person blocked the bot), not only the one message: the reply
fails, and our notice that it did not get there is not sent through that same account,
or to that chat, where it could only fail too. It is stored and shown on the page, its
delivery failed where the admin sees why; the log says it. Nor is the rest of what waits
for that account (or chat) tried, a refused request apiece."""
from __future__ import annotations

import logging

import pytest

from channels_app.models import OutboundDelivery
from channels_app.tasks import deliver_message_task
from sessions_app.models import Message
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

from ..fakes.platform_server import Canned
from .conftest import pair, replies_waiting
from .test_slack_discord_email_sms import discord, discord_key, slack  # noqa: F401 (fixtures)

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
    # Meta refuses the account with other codes too, and with a 403 (a permission taken
    # away, a locked or unpaid account): nothing goes out through it until that is fixed.
    "whatsapp-403-permission": ("whatsapp", "/whatsapp/v21.0/1055/messages", "15550100", Canned(403, {"error": {
        "message": "(#10) Application does not have permission for this action", "type": "OAuthException",
        "code": 10}})),
    "whatsapp-131031": ("whatsapp", "/whatsapp/v21.0/1055/messages", "15550100", Canned(400, {"error": {
        "message": "(#131031) Business Account locked", "type": "OAuthException", "code": 131031}})),
    "whatsapp-131042": ("whatsapp", "/whatsapp/v21.0/1055/messages", "15550100", Canned(400, {"error": {
        "message": "(#131042) Business eligibility payment issue", "type": "OAuthException", "code": 131042}})),
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


# How each platform refuses the one chat, not the account: the person blocked the bot, it
# was removed from the group, the chat is closed to it. The bot still sends elsewhere.
CHAT_REFUSALS = {
    "telegram-blocked": ("telegram", "/telegram/bot111:AAA/sendMessage", "42", Canned(403, {
        "ok": False, "error_code": 403, "description": "Forbidden: bot was blocked by the user"})),
    "telegram-kicked": ("telegram", "/telegram/bot111:AAA/sendMessage", "42", Canned(403, {
        "ok": False, "error_code": 403, "description": "Forbidden: bot was kicked from the group chat"})),
    "telegram-chat-not-found": ("telegram", "/telegram/bot111:AAA/sendMessage", "42", Canned(400, {
        "ok": False, "error_code": 400, "description": "Bad Request: chat not found"})),
    "discord-50007": ("discord", "/discord/api/v10/channels/555/messages", "555",
                      Canned(403, {"message": "Cannot send messages to this user", "code": 50007})),
    "slack-channel_not_found": ("slack", "/slack/api/chat.postMessage", "D0DM",
                                Canned(200, {"ok": False, "error": "channel_not_found"})),
    "slack-not_in_channel": ("slack", "/slack/api/chat.postMessage", "D0DM",
                             Canned(200, {"ok": False, "error": "not_in_channel"})),
    "slack-is_archived": ("slack", "/slack/api/chat.postMessage", "D0DM",
                          Canned(200, {"ok": False, "error": "is_archived"})),
    "whatsapp-131047": ("whatsapp", "/whatsapp/v21.0/1055/messages", "15550100", Canned(400, {"error": {
        "message": "Re-engagement message", "type": "OAuthException", "code": 131047}})),
    # Not a WhatsApp number, terms not accepted, an app too old: the notice could not get there either.
    "whatsapp-131026": ("whatsapp", "/whatsapp/v21.0/1055/messages", "15550100", Canned(400, {"error": {
        "message": "(#131026) Message Undeliverable.", "type": "OAuthException", "code": 131026}})),
    # A 403 about the person, not the token: the account may not message people in their country.
    "whatsapp-403-130497": ("whatsapp", "/whatsapp/v21.0/1055/messages", "15550100", Canned(403, {"error": {
        "message": "(#130497) Business account is restricted from messaging users in this country.",
        "type": "OAuthException", "code": 130497}})),
    "sms-21610": ("sms", "/twilio/2010-04-01/Accounts/AC123/Messages.json", "+15550002222",
                  Canned(400, {"code": 21610, "message": "Attempt to send to unsubscribed recipient", "status": 400})),
}


@pytest.fixture
def chat_binding(request, world, telegram, whatsapp, sms, slack, discord):  # noqa: F811
    return {"telegram": telegram, "whatsapp": whatsapp, "sms": sms, "slack": slack, "discord": discord}[
        CHAT_REFUSALS[request.param][0]]


@pytest.mark.parametrize("chat_binding, refusal", [(name, name) for name in CHAT_REFUSALS],
                         indirect=["chat_binding"], ids=list(CHAT_REFUSALS))
def test_a_reply_refused_for_its_chat_is_not_followed_by_a_notice_sent_to_that_chat(
    world, chat_binding, platform, drain, refusal
):
    """The platform refuses the one chat (the person blocked the bot, it left the group,
    the channel is archived): our notice sent there could only be refused too. It is
    stored (the page shows it), its delivery failed unsent with the reason."""
    _, path, target, answered = CHAT_REFUSALS[refusal]
    platform.default(path, answered)
    answer = refused_reply(world, chat_binding, target)
    deliver_message_task.delay(world.tenant_a.pk, answer.pk)
    drain()
    assert len(platform.sent(path)) == 1  # the reply's send, and no other
    (notice,) = Message.objects.filter(role="system", metadata__notice="reply_undelivered")
    assert notice.content.startswith("My last reply may not have reached you.")
    answer_part, notice_part = OutboundDelivery.objects.order_by("pk")
    assert answer_part.last_error.startswith(f"{chat_binding.kind} refused this chat")  # for the admin
    assert (notice_part.state, notice_part.attempts) == ("failed", 0)
    assert notice_part.last_error.startswith("not sent") and "refused this chat" in notice_part.last_error


def test_an_email_reply_whose_mail_server_refuses_our_login_is_not_followed_by_a_notice_sent_the_same_way(
    world, email, settings, drain  # noqa: F811
):
    """The mail server turns down the binding's login for good (535): the notice would
    log in the same way."""
    settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = "aria@acme.example", "a-stale-password"
    answer_part, notice_part = email_reply_sent(
        world, email, settings, drain, AUTH=b"535 5.7.8 Authentication credentials invalid\r\n")
    assert answer_part.state == "failed" and answer_part.last_error.startswith("email refused the account itself")
    assert (notice_part.state, notice_part.attempts) == ("failed", 0)
    assert "not sent" in notice_part.last_error


def three_parts_and_a_reply_waiting_sent(world, telegram, drain) -> tuple[Message, Message]:
    """Alice paired on Telegram; a reply of three parts (ANSWER, "part 1", "part 2") and one
    waiting behind it for the bot; the first one's send run to the end."""
    pair(world, "telegram", "42", world.alice)
    first, second = replies_waiting(world, telegram, [ANSWER, "Bring the slides."])
    for part in (1, 2):
        OutboundDelivery.objects.create(tenant=world.tenant_a, message=first, part=part, binding=telegram,
                                        target="42", text=f"part {part}")
    deliver_message_task.delay(world.tenant_a.pk, first.pk)
    drain()
    return first, second


def test_once_the_account_is_refused_the_rest_of_the_reply_and_the_replies_waiting_are_failed_unsent(
    world, telegram, platform, drain
):
    """The platform refused the bot's token for the first part: the rest of that reply,
    and the replies waiting for the bot, would be refused the same way, one request each.
    They are failed at once, with the reason, for the admin and the page. The token fixed
    in the admin, the next reply goes out at once."""
    path = "/telegram/bot111:AAA/sendMessage"
    platform.default(path, Canned(401, {"ok": False, "error_code": 401, "description": "Unauthorized"}))
    first, second = three_parts_and_a_reply_waiting_sent(world, telegram, drain)
    assert [s.json["text"] for s in platform.sent(path)] == [ANSWER]  # one request, and no other
    parts = list(OutboundDelivery.objects.filter(message__in=[first, second]).order_by("message_id", "part"))
    assert [(p.state, p.attempts) for p in parts] == [("failed", 1), ("failed", 0), ("failed", 0), ("failed", 0)]
    for unsent in parts[1:]:  # why, for the admin
        assert unsent.last_error.startswith("not sent:") and "telegram refused the account itself" in unsent.last_error
        assert "401" in unsent.last_error
    assert not OutboundDelivery.objects.filter(state__in=["pending", "sending"]).exists()
    notices = OutboundDelivery.objects.filter(message__metadata__notice="reply_undelivered")
    (notice,) = notices  # on the page, once for both replies, as for a notice still to be sent
    assert notice.state == "failed" and notice.last_error.startswith("not sent")
    assert notice.message.seq > second.seq

    # The token fixed in the admin: nothing of the refusal is held against the binding.
    telegram.credentials = {**telegram.credentials, "token": "111:BBB"}
    telegram.save(update_fields=["credentials"])
    platform.default("/telegram/bot111:BBB/sendMessage", Canned(body={"ok": True, "result": {"message_id": 9}}))
    (later,) = replies_waiting(world, telegram, ["See you then."])
    deliver_message_task.delay(world.tenant_a.pk, later.pk)
    drain()
    assert [s.json["text"] for s in platform.sent("/telegram/bot111:BBB/sendMessage")] == ["See you then."]
    assert OutboundDelivery.objects.get(message=later).state == "sent"


def test_an_email_reply_whose_address_the_mail_server_refuses_is_not_followed_by_a_notice_to_it(
    world, email, settings, drain  # noqa: F811
):
    """The mail server refuses the address for good (550, no such user): our notice would
    be refused the same way."""
    answer_part, notice_part = email_reply_sent(world, email, settings, drain, RCPT=b"550 5.1.1 no such user\r\n")
    assert answer_part.state == "failed" and answer_part.last_error.startswith("email refused this chat")
    assert (notice_part.state, notice_part.attempts) == ("failed", 0)
    assert "not sent" in notice_part.last_error


def test_once_a_chat_is_refused_the_replies_waiting_for_it_are_failed_unsent_and_other_chats_still_get_theirs(
    world, telegram, platform, drain
):
    """Blocked by one person: the replies waiting for their chat are refused the same
    way, and are not tried; the bot's replies to someone else still go."""
    path = "/telegram/bot111:AAA/sendMessage"
    platform.default(path, Canned(body={"ok": True, "result": {"message_id": 9}}))
    platform.script(path, Canned(403, {"ok": False, "error_code": 403,
                                       "description": "Forbidden: bot was blocked by the user"}))
    pair(world, "telegram", "42", world.alice)
    first, second = replies_waiting(world, telegram, [ANSWER, "Bring the slides."])
    pair(world, "telegram", "77", world.bob)
    bobs = message_append(session=session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram",
                                                  user=world.bob),
                          role="assistant", content="Your parcel is here.", channel="telegram", notify=False).message
    OutboundDelivery.objects.create(tenant=world.tenant_a, message=bobs, part=0, binding=telegram, target="77",
                                    text="Your parcel is here.")
    deliver_message_task.delay(world.tenant_a.pk, first.pk)
    drain()
    assert [(s.json["chat_id"], s.json["text"]) for s in platform.sent(path)] == [
        ("42", ANSWER), ("77", "Your parcel is here.")]
    waiting = OutboundDelivery.objects.get(message=second)
    assert (waiting.state, waiting.attempts) == ("failed", 0)
    assert waiting.last_error.startswith("not sent:") and "telegram refused this chat" in waiting.last_error
    assert OutboundDelivery.objects.get(message=bobs).state == "sent"


def test_an_ask_answered_through_its_own_token_is_still_sent_after_the_bots_token_is_refused(
    world, discord, platform, drain  # noqa: F811
):
    """An /ask answered in time goes through its interaction's token, not the bot's: the
    bot's token refused for a DM reply just before, the answer still goes."""
    from channels_app.adapters.discord_asks import ask_target

    platform.default("/discord/api/v10/channels/555/messages", PLATFORMS["discord-401"][3])
    platform.default(r"/webhooks/.*/tok-1$", Canned(body={"id": "900"}))
    answer = refused_reply(world, discord, "555")
    asked = ask_target(channel="777", token="tok-1", asker="555", place="server", question="the agenda?")
    later = message_append(session=answer.session, role="assistant", content="Three items.", channel="discord_dm",
                           notify=False).message
    OutboundDelivery.objects.create(tenant=world.tenant_a, message=later, part=0, binding=discord, target=asked,
                                    text="Three items.")
    deliver_message_task.delay(world.tenant_a.pk, answer.pk)
    drain()
    assert [s.json["content"] for s in platform.sent(r"/webhooks/.*/tok-1$")] == ["Three items."]
    assert OutboundDelivery.objects.get(message=later).state == "sent"


def email_reply_sent(world, email, settings, drain, **answers):
    """An email reply sent through a real SMTP server answering as `answers` say: its part
    and the notice's, in that order."""
    from ..fakes.smtp_server import smtp_server

    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    with smtp_server(**answers) as port:
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
        answer = refused_reply(world, email, "\x1f".join(["priya@example.com", "<m1@example.com>", "Re: Trip plans"]))
        deliver_message_task.delay(world.tenant_a.pk, answer.pk)
        drain()
    return OutboundDelivery.objects.order_by("pk")


def test_a_token_fixed_while_the_refused_send_was_out_sends_the_reply_and_those_waiting_with_the_new_one(
    world, telegram, platform, drain
):
    """The host fixes the bot's token in the admin while the send, which read the old one,
    is being refused for it: the refusal is of a token the bot no longer has. The reply
    and the replies waiting go out with the new token, none of them lost; before, the rest
    was sent with the old one still held by the send, each part refused and failed in turn."""
    from channels_app.models import ChannelBinding

    def token_fixed(_request) -> None:
        ChannelBinding.objects.filter(pk=telegram.pk).update(credentials={**telegram.credentials, "token": "111:BBB"})

    old, new = "/telegram/bot111:AAA/sendMessage", "/telegram/bot111:BBB/sendMessage"
    platform.script(old, Canned(401, {"ok": False, "error_code": 401, "description": "Unauthorized"},
                                meanwhile=token_fixed))
    platform.default(old, Canned(401, {"ok": False, "error_code": 401, "description": "Unauthorized"}))
    platform.default(new, Canned(body={"ok": True, "result": {"message_id": 9}}))
    first, second = three_parts_and_a_reply_waiting_sent(world, telegram, drain)
    assert [s.json["text"] for s in platform.sent(old)] == [ANSWER]  # refused, for the token replaced meanwhile
    assert [s.json["text"] for s in platform.sent(new)] == [ANSWER, "part 1", "part 2", "Bring the slides."]
    assert set(OutboundDelivery.objects.values_list("state", flat=True)) == {"sent"}
    assert OutboundDelivery.objects.get(message=first, part=0).attempts == 2  # the refused try, counted
    assert not Message.objects.filter(metadata__notice="reply_undelivered").exists()
