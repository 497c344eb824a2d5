"""Two tenants' Qors in one group chat: each answers only what is addressed to it.

What counts as addressed is tested with bindings that answer anyone in groups
(`group_answers="anyone"`): the senders here are strangers to both Qors."""
from __future__ import annotations

import pytest

from channels_app.services import binding_create
from sessions_app.models import Message, Session

from ..fakes.model_server import reply
from .payloads import post_telegram, telegram_update
from .test_slack_discord_email_sms import post_slack, slack, slack_event  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)

GROUP = dict(chat_id=-100777, chat_type="supergroup")


@pytest.fixture
def telegram(world):
    """Acme's @aria_bot, answering anyone's mention in a group."""
    return binding_create(
        tenant=world.tenant_a, qor=world.qor_a, kind="telegram", group_answers="anyone",
        credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"},
    )


@pytest.fixture
def other_bot(world):
    """Globex's Qor, a bot of its own in the same Telegram group as acme's @aria_bot."""
    return binding_create(
        tenant=world.tenant_b, qor=world.qor_b, kind="telegram", group_answers="anyone",
        credentials={"token": "222:BBB", "secret": "tg-secret-b", "username": "aria_bot_helper"},
    )


def _answered_by(platform, token: str) -> list[str]:
    return [s.json["text"] for s in platform.sent(rf"/telegram/bot{token}/sendMessage")]


@pytest.mark.parametrize("text", ["@aria_bot_helper what's the weather?", "/history@aria_bot_helper 5",
                                  "/status@aria_bot_helper"])
def test_a_mention_or_command_for_another_bot_whose_name_starts_like_ours_is_not_ours(
    client, world, telegram, other_bot, platform, model_server, drain, text
):
    """Telegram delivers every group message to every bot in it. @aria_bot_helper (another
    tenant's Qor) begins with @aria_bot: acme's Qor took it for its own mention and answered
    it — with a model reply, with the group's history or its status."""
    model_server.default = reply("answered")
    post_telegram(client, telegram_update(text, user_id=77, first_name="Carol", message_id=1, **GROUP))
    post_telegram(client, telegram_update(text, user_id=77, first_name="Carol", message_id=1, **GROUP),
                  secret="tg-secret-b")
    drain()
    assert _answered_by(platform, "111:AAA") == []
    assert len(_answered_by(platform, "222:BBB")) == 1
    ours = Session.objects.get(tenant=world.tenant_a, kind="group")
    # Kept as the group's context all the same, waiting for no answer.
    assert list(Message.objects.filter(session=ours).values_list("role", "content")) == [("user", text)]


def test_our_own_mention_still_counts_next_to_punctuation_and_in_any_case(
    client, world, telegram, platform, model_server, drain
):
    model_server.default = reply("here")
    for number, text in enumerate(["hi @Aria_Bot, dinner?", "(@aria_bot)", "/status@aria_bot"], start=1):
        post_telegram(client, telegram_update(text, user_id=77, first_name="Carol", message_id=number, **GROUP))
    drain()
    assert len(_answered_by(platform, "111:AAA")) == 3


def test_without_a_username_a_reply_counts_only_when_it_is_to_this_bot(
    client, world, platform, model_server, drain
):
    """A binding saved without the bot's @username (it is optional) took a reply to any bot
    in the group for a reply to itself: a reply to another tenant's bot was answered by
    both. The bot's own id is the number its token begins with."""
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram", group_answers="anyone",
                   credentials={"token": "111:AAA", "secret": "tg-secret-a"})
    model_server.default = reply("Eight it is.")
    said = {"message_id": 5, "chat": {"id": -100777, "type": "supergroup"}, "date": 1, "text": "Dinner at 8?"}
    theirs = {"id": 222, "is_bot": True, "first_name": "Helper", "username": "aria_bot_helper"}
    ours = {"id": 111, "is_bot": True, "first_name": "Aria", "username": "aria_bot"}
    post_telegram(client, telegram_update("thanks, helper", user_id=77, first_name="Carol", message_id=6,
                                          reply_to_message={**said, "from": theirs}, **GROUP))
    post_telegram(client, telegram_update("ok, book it", user_id=77, first_name="Carol", message_id=7,
                                          reply_to_message={**said, "message_id": 4, "from": ours}, **GROUP))
    drain()
    assert len(model_server.requests) == 1
    assert model_server.requests[0]["messages"][-1]["content"] == "[telegram] Carol: ok, book it"
    assert _answered_by(platform, "111:AAA") == ["Eight it is."]


def test_a_reply_in_a_slack_thread_under_the_qors_message_is_answered_there(
    client, world, slack, platform, model_server, drain  # noqa: F811
):
    """In a Slack channel the Qor answers when mentioned or replied to; a reply is written in
    the thread of the message it answers. One under the Qor's own message went unanswered
    unless it mentioned the Qor again; one under someone else's message is still chatter."""
    slack.group_answers = "anyone"
    slack.save(update_fields=["group_answers"])
    model_server.default = reply("Booked for eight.")
    ours = slack_event("book it then", channel_type="channel", channel="C0GEN", event_id="EvR1")
    ours["event"].update(thread_ts="1712345600.000001", parent_user_id="UBOT")
    theirs = slack_event("me too", channel_type="channel", channel="C0GEN", event_id="EvR2")
    theirs["event"].update(thread_ts="1712345600.000009", parent_user_id="U0RAVI")
    post_slack(client, ours)
    post_slack(client, theirs)
    drain()
    (asked,) = model_server.requests
    assert asked["messages"][-1]["content"].endswith(": book it then")
    (sent,) = platform.sent("chat.postMessage")
    assert sent.json == {"channel": "C0GEN", "text": "Booked for eight.", "thread_ts": "1712345600.000001"}
