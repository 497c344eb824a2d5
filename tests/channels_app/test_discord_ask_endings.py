"""Every /ask ends for the person who asked: Discord shows a deferred /ask as the bot
thinking until it is followed up, so a turn that fails says our notice there, one that
ends with nothing said takes the thinking away, and an answer later than the
interaction's 15 minutes is posted in the chat the question was asked in."""
from __future__ import annotations

import pytest

from channels_app.models import ChannelBinding, OutboundDelivery
from qorven.agent.gateway import inbound_accept
from sessions_app.models import Message
from sessions_app.services import session_resolve
from tenancy.models import Membership
from tenancy.trust import Trust

from ..agent.test_membership_mid_turn import HeldModel
from ..fakes.model_server import error, reply
from ..fakes.platform_server import Canned
from .conftest import pair
from .test_group_privacy import ALICE_DISCORD, ask
from .test_slack_discord_email_sms import discord, discord_key, post_discord  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

FOLLOWUP = r"/discord/api/v10/webhooks/9001/token-"


def _followed_up(platform) -> list[str]:
    return [r.json["content"] for r in platform.sent(FOLLOWUP) if r.method == "POST"]


def _withdrawn(platform) -> list[str]:
    return [r.path.removeprefix("/discord/api/v10") for r in platform.sent(FOLLOWUP) if r.method == "DELETE"]


def _ask(client, world, discord_key, text="what is on today?", interaction="71"):  # noqa: F811
    pair(world, "discord", ALICE_DISCORD, world.alice)
    assert post_discord(client, ask(text, context=1, interaction=interaction), discord_key).json() == {"type": 5}


def test_an_ask_the_model_never_answers_ends_with_our_notice(
    client, world, discord, discord_key, platform, model_server, drain, settings  # noqa: F811
):
    settings.QORVEN_MODEL_RETRIES, settings.QORVEN_ANSWER_ATTEMPTS = 0, 1
    model_server.default = error(503, "upstream pool exhausted at 10.0.0.7")
    _ask(client, world, discord_key)
    drain()
    (notice,) = _followed_up(platform)
    assert "isn't answering right now" in notice and "10.0.0.7" not in notice
    assert _withdrawn(platform) == []


def test_an_ask_the_model_refuses_ends_with_our_notice(
    client, world, discord, discord_key, platform, model_server, drain, settings  # noqa: F811
):
    settings.QORVEN_MODEL_RETRIES = 0
    model_server.default = error(400, "content policy violation #4471", code="content_filter")
    _ask(client, world, discord_key)
    drain()
    (notice,) = _followed_up(platform)
    assert "refused" in notice and "4471" not in notice


def test_an_ask_whose_answer_is_cut_gets_it_and_the_cut_off_notice(
    client, world, discord, discord_key, platform, model_server, drain  # noqa: F811
):
    model_server.default = reply("Today you have", finish="length")
    _ask(client, world, discord_key)
    drain()
    answer, notice = _followed_up(platform)
    assert answer == "Today you have" and "length limit" in notice


def test_an_ask_whose_sender_was_removed_while_the_model_thought_stops_thinking(
    client, world, discord, discord_key, platform, model_server, drain  # noqa: F811
):
    """No notice, by design (they no longer read this chat); the deferred answer was left
    thinking until Discord gave up."""
    held = HeldModel(reply("Three meetings."), reply("unused"))
    model_server.default = held
    _ask(client, world, discord_key)
    assert held.arrived.wait(30)
    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).delete()
    held.release.set()
    drain()
    assert _followed_up(platform) == []
    assert _withdrawn(platform) == ["/webhooks/9001/token-71/messages/@original"]


def test_an_ask_cleared_from_the_web_page_while_the_model_thought_stops_thinking(
    client, world, discord, discord_key, platform, model_server, drain  # noqa: F811
):
    """/clear on the page ends the conversation the ask was in: its answer has no place to
    go, and the ask was left thinking."""
    held = HeldModel(reply("Three meetings."), reply("Cleared, then."))
    model_server.default = held
    _ask(client, world, discord_key)
    assert held.arrived.wait(30)
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    inbound_accept(session=chat, content="/clear", channel="web", sender_name="Alice", trust=Trust.OWNER)
    held.release.set()
    drain()
    assert _followed_up(platform) == []
    assert _withdrawn(platform) == ["/webhooks/9001/token-71/messages/@original"]


def test_an_ask_answered_after_its_binding_was_switched_off_stops_thinking(
    client, world, discord, discord_key, platform, model_server, drain  # noqa: F811
):
    held = HeldModel(reply("Three meetings."), reply("unused"))
    model_server.default = held
    _ask(client, world, discord_key)
    assert held.arrived.wait(30)
    ChannelBinding.objects.filter(pk=discord.pk).update(enabled=False)
    held.release.set()
    drain()
    assert _followed_up(platform) == []
    assert OutboundDelivery.objects.get().state == OutboundDelivery.State.FAILED
    assert _withdrawn(platform) == ["/webhooks/9001/token-71/messages/@original"]


def test_an_answer_later_than_the_interaction_token_is_posted_in_the_chat_instead(
    client, world, discord, discord_key, platform, model_server, drain  # noqa: F811
):
    """After 15 minutes (a slow model, a queue) Discord refuses the interaction's token
    (401, Invalid Webhook Token): the answer was lost, failed for good."""
    platform.script(FOLLOWUP, Canned(401, {"message": "Invalid Webhook Token", "code": 50027}))
    model_server.default = reply("Three meetings, the first at nine.")
    _ask(client, world, discord_key)
    drain()
    (posted,) = [r for r in platform.sent(r"/discord/api/v10/channels/555/messages")]
    assert posted.json["content"] == "Three meetings, the first at nine."
    assert posted.headers["Authorization"] == "Bot discord-bot-token"
    assert OutboundDelivery.objects.get().state == OutboundDelivery.State.SENT
    assert Message.objects.filter(role="assistant").count() == 1
