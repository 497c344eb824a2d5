"""A platform message's whole path while the cache (Redis) is away: the webhook, the
inbound task, the turn, the reply stored and sent. The cache is a Redis server of the
test's own, really stopped; on PostgreSQL the send gates are the database's."""
from __future__ import annotations

import time

import pytest

from channels_app.models import OutboundDelivery
from sessions_app.models import Message

from ..fakes.model_server import reply
from ..processes import needs_postgres_and_redis, wait_for
from .conftest import pair
from .payloads import post_telegram, telegram_update

pytestmark = [pytest.mark.django_db(transaction=True), needs_postgres_and_redis]


def test_a_telegram_message_while_the_cache_is_away_is_answered_once(
    client, world, telegram, platform, model_server, drain, cache_redis
):
    stop, _ = cache_redis
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("Here I am.")
    stop()
    assert post_telegram(client, telegram_update("hello?", message_id=1)).status_code == 200
    drain()
    assert post_telegram(client, telegram_update("again?", message_id=2)).status_code == 200
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["Here I am.", "Here I am."]
    assert list(Message.objects.filter(session__tenant=world.tenant_a).order_by("seq").values_list(
        "role", "content")) == [("user", "hello?"), ("assistant", "Here I am."),
                                ("user", "again?"), ("assistant", "Here I am.")]


def test_with_the_send_gates_in_the_cache_a_reply_written_while_it_is_away_goes_once_it_is_back(
    client, world, telegram, platform, model_server, drain, cache_redis, settings
):
    """The turn answers with Redis away; its bot's gate is a key in the cache, so the
    reply cannot go yet: its send comes back on the worker's timer and the reply goes
    once Redis is back, once, with no pass of the sweeper. Before, the send task the turn
    handed it to failed on the gate's take (Redis' ConnectionError): the reply waited for
    the sweeper's pass."""
    settings.QORVEN_SEND_GATES = "cache"
    stop, start = cache_redis
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("Here I am.")
    stop()
    assert post_telegram(client, telegram_update("hello?", message_id=1)).status_code == 200
    assert wait_for(lambda: Message.objects.filter(role="assistant", content="Here I am.").exists(), 20)
    time.sleep(0.5)  # its send meets the cache away
    assert platform.sent("sendMessage") == []
    start()
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["Here I am."]
    assert list(OutboundDelivery.objects.values_list("state", flat=True)) == ["sent"]


def test_a_telegram_group_message_naming_the_bot_while_the_cache_is_away_is_answered(
    client, world, telegram, platform, model_server, drain, cache_redis
):
    stop, _ = cache_redis
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("In the group.")
    stop()
    update = telegram_update("@aria_bot hello?", chat_id=-100, chat_type="group")
    assert post_telegram(client, update).status_code == 200
    drain()
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["In the group."]


def test_a_slack_message_while_the_cache_is_away_is_answered_with_its_senders_name(
    client, world, platform, model_server, drain, cache_redis
):
    """The sender's looked-up name is kept in the cache: with the cache away it is asked
    of Slack again, and the message is answered. Before, the name's read raised out of
    the inbound task: the message was never stored, never answered."""
    from ..fakes.platform_server import Canned
    from channels_app.services import binding_create

    from .test_slack_discord_email_sms import post_slack, slack_event

    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="slack", credentials={
        "app_id": "A0APP", "bot_token": "xoxb-1", "signing_secret": "slack-signing", "bot_user_id": "UBOT"})
    identity = pair(world, "slack", "U0PRIYA", world.alice)
    identity.display_name = ""
    identity.save(update_fields=["display_name"])
    platform.default(r"/slack/api/users.info", Canned(body={
        "ok": True, "user": {"id": "U0PRIYA", "name": "priya", "real_name": "Priya Raman",
                             "profile": {"display_name": "", "real_name": "Priya Raman"}}}))
    model_server.default = reply("Hi Priya")
    stop, _ = cache_redis
    stop()
    post_slack(client, slack_event("hello", event_id="Ev10"))
    drain()
    assert model_server.requests[0]["messages"][-1]["content"] == "[slack_dm] Priya Raman: hello"
    assert [s.json["text"] for s in platform.sent(r"/slack/api/chat.postMessage")] == ["Hi Priya"]


def test_an_unknown_senders_message_while_the_cache_is_away_gets_its_code_once_the_cache_is_back(
    client, world, telegram, platform, drain, cache_redis
):
    """Whether a pairing code may be sent again is kept in the cache (a forged sender must
    not make the bot write on every message): with the cache away the message's task
    comes back on the worker's timer, and once Redis is back the code is sent, once.
    Before, the event was marked failed on Redis' ConnectionError: no code, ever."""
    from channels_app.models import InboundEvent, PairingRequest

    from ..agent.test_turns import _task_runs, _until

    stop, start = cache_redis
    stop()
    with _task_runs("channels_app.inbound") as runs:
        assert post_telegram(client, telegram_update("hi, who are you?", message_id=1)).status_code == 200
        _until(lambda: "RETRY" in runs)  # it found the cache away
        start()
        drain()
    code = PairingRequest.objects.get().code
    assert [s.json["text"] for s in platform.sent("sendMessage") if code in s.json["text"]] != []
    assert len(platform.sent("sendMessage")) == 1
    assert list(InboundEvent.objects.values_list("state", flat=True)) == ["done"]


def test_a_slack_mention_while_the_cache_is_away_is_answered_and_the_bot_learned(
    client, world, platform, model_server, drain, cache_redis
):
    """A binding saved without its bot's user id, an event not naming it: the bot is asked
    of Slack (at most every few minutes, a mark in the cache). With the cache away it is
    asked, saved on the binding, and the mention answered. Before, the mark's write raised
    out of the inbound task: the mention was never stored, never answered."""
    from channels_app.models import ChannelBinding
    from channels_app.services import binding_create

    from ..fakes.platform_server import Canned
    from .test_slack_discord_email_sms import post_slack
    from .test_slack_mentions import AUTH_TEST, _channel_event

    platform.default(AUTH_TEST, Canned(body={"ok": True, "team_id": "T0TEAM", "user_id": "UBOT"}))
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="slack", credentials={
        "app_id": "A0APP", "bot_token": "xoxb-1", "signing_secret": "slack-signing"})
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.default = reply("On it.")
    stop, _ = cache_redis
    stop()
    post_slack(client, _channel_event("<@UBOT> book a table", "message", "Ev1"))
    drain()
    assert [m.content for m in Message.objects.filter(role="user")] == ["<@UBOT> book a table"]
    assert [s.json["text"] for s in platform.sent("chat.postMessage")] == ["On it."]
    assert ChannelBinding.objects.get(kind="slack").credentials["bot_user_id"] == "UBOT"
    assert len(platform.sent(AUTH_TEST)) == 1
