"""Slack sends a mention in a channel twice, as a message event and as an app_mention:
kept and answered once, whatever the binding knows of its bot and whichever comes first."""
from __future__ import annotations

import pytest

from channels_app.models import ChannelBinding
from channels_app.services import binding_create
from sessions_app.models import Message

from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from .conftest import pair
from .test_slack_discord_email_sms import post_slack, slack_event

pytestmark = pytest.mark.django_db(transaction=True)

AUTH_TEST = r"/slack/api/auth.test"


@pytest.fixture
def slack_unnamed(world, platform):
    """A binding saved without bot_user_id (it is optional), whose bot token Slack's
    auth.test names as the bot user UBOT."""
    platform.default(AUTH_TEST, Canned(body={"ok": True, "team_id": "T0TEAM", "user_id": "UBOT",
                                             "bot_id": "B0BOT", "app_id": "A0APP"}))
    return binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="slack", credentials={
        "app_id": "A0APP", "bot_token": "xoxb-1", "signing_secret": "slack-signing"})


def _channel_event(text: str, kind: str, event_id: str, ts: str = "1712345678.000100") -> dict:
    """As older deliveries send it: no `authorizations` naming the bot."""
    event = slack_event(text, channel_type="channel", channel="C0GEN", kind=kind, event_id=event_id)
    event["event"]["ts"] = event["event"]["event_ts"] = ts
    return event


@pytest.mark.parametrize("first", ["message", "app_mention"])
def test_a_mention_without_the_bots_id_anywhere_is_kept_and_answered_once(
    client, world, slack_unnamed, platform, model_server, drain, first
):
    """Neither the binding nor the events named the bot: the message event could not be
    told from the app_mention, and the question was stored and answered twice."""
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.default = reply("On it.")
    second = "app_mention" if first == "message" else "message"
    post_slack(client, _channel_event("<@UBOT> book a table", first, f"Ev-{first}"))
    post_slack(client, _channel_event("<@UBOT> book a table", second, f"Ev-{second}"))
    drain()
    assert [m.content for m in Message.objects.filter(role="user")] == ["<@UBOT> book a table"]
    assert len(model_server.requests) == 1
    assert [s.json["text"] for s in platform.sent("chat.postMessage")] == ["On it."]


def test_the_bots_id_is_learned_once_and_a_mention_of_someone_else_stays_context(
    client, world, slack_unnamed, platform, model_server, drain
):
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.default = reply("On it.")
    post_slack(client, _channel_event("<@UBOB> can you bring the wine?", "message", "Ev1", ts="1712345601.000100"))
    drain()
    post_slack(client, _channel_event("<@UBOT> book a table", "message", "Ev2", ts="1712345602.000100"))
    post_slack(client, _channel_event("<@UBOT> book a table", "app_mention", "Ev3", ts="1712345602.000100"))
    drain()
    assert [m.content for m in Message.objects.filter(role="user").order_by("seq")] == [
        "<@UBOB> can you bring the wine?", "<@UBOT> book a table"]
    assert [s.json["text"] for s in platform.sent("chat.postMessage")] == ["On it."]
    assert ChannelBinding.objects.get(kind="slack").credentials["bot_user_id"] == "UBOT"
    assert len(platform.sent(AUTH_TEST)) == 1  # saved on the binding: not asked for every message


def test_a_reply_in_the_bots_thread_is_answered_when_the_bot_is_learned_from_slack(
    client, world, slack_unnamed, platform, model_server, drain
):
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.default = reply("Seven works.")
    event = _channel_event("what about seven?", "message", "Ev4", ts="1712345700.000100")
    event["event"].update(thread_ts="1712345650.000100", parent_user_id="UBOT")
    post_slack(client, event)
    drain()
    (sent,) = platform.sent("chat.postMessage")
    assert sent.json == {"channel": "C0GEN", "text": "Seven works.", "thread_ts": "1712345650.000100"}
