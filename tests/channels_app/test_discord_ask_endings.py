"""Every /ask ends for the person who asked: Discord shows a deferred /ask as the bot
thinking until it is followed up, so a turn that fails says our notice there, one that
ends with nothing said takes the thinking away, and an answer later than the
interaction's 15 minutes is posted in the chat the question was asked in."""
from __future__ import annotations

import pytest

from channels_app.models import ChannelBinding, OutboundDelivery
from qorven.agent.gateway import inbound_accept
from sessions_app.models import Message
from sessions_app.services.resolve import session_resolve
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


def _late(platform) -> None:
    """Discord refuses every follow-up: the answer came after the token's 15 minutes."""
    platform.default(FOLLOWUP, Canned(401, {"message": "Invalid Webhook Token", "code": 50027}))


def _server_ask(text: str, *, interaction: str) -> dict:
    """An /ask in a server's channel: Discord names the server and the asker as a member."""
    body = {**ask(text, context=0, interaction=interaction), "guild_id": "3333"}
    body["member"] = {"user": body.pop("user"), "roles": [], "nick": None}
    body["channel"] = {"id": "555", "type": 0, "guild_id": "3333"}
    return body


def test_a_late_answer_in_a_server_channel_mentions_who_asked_and_only_them(
    client, world, discord, discord_key, platform, model_server, drain  # noqa: F811
):
    """Posted in the channel after the token lapsed, the answer named nobody: the channel
    read an answer to a question it could not place, and the asker was not told."""
    _late(platform)
    pair(world, "discord", ALICE_DISCORD, world.alice)
    model_server.default = reply("Three meetings, the first at nine.")
    assert post_discord(client, _server_ask("what is on today? @everyone", interaction="72"),
                        discord_key).json() == {"type": 5}
    drain()
    (posted,) = platform.sent(r"/discord/api/v10/channels/555/messages")
    assert posted.json["content"].startswith(f"<@{ALICE_DISCORD}> ")
    assert "“what is on today? @everyone”" in posted.json["content"]
    assert posted.json["content"].endswith("\nThree meetings, the first at nine.")
    assert posted.json["allowed_mentions"] == {"parse": [], "users": [ALICE_DISCORD]}
    assert OutboundDelivery.objects.get().state == OutboundDelivery.State.SENT


def test_a_late_answer_quotes_the_question_without_discord_reading_its_formatting(
    client, world, discord, discord_key, platform, model_server, drain  # noqa: F811
):
    """The question quoted at the head of a late answer is the asker's text in a line of
    ours: its markers made the rest of the line bold, struck or hidden, or opened a code
    block over the answer."""
    _late(platform)
    pair(world, "discord", ALICE_DISCORD, world.alice)
    model_server.default = reply("**Three** meetings.")
    assert post_discord(client, _server_ask("is it **urgent** ~~or not~~ ||really|| ```now", interaction="74"),
                        discord_key).json() == {"type": 5}
    drain()
    (posted,) = platform.sent(r"/discord/api/v10/channels/555/messages")
    header, answer = posted.json["content"].split("\n")
    assert header == f"<@{ALICE_DISCORD}> answering your /ask “is it ∗∗urgent∗∗ ∼∼or not∼∼ ǀǀreallyǀǀ ˋˋˋnow”:"
    assert answer == "**Three** meetings."  # the model's Markdown, which Discord renders


def test_a_long_late_answer_mentions_who_asked_once(
    client, world, discord, discord_key, platform, model_server, drain  # noqa: F811
):
    _late(platform)
    pair(world, "discord", ALICE_DISCORD, world.alice)
    model_server.default = reply(("All the day's meetings. " * 60 + "\n\n") * 2)
    post_discord(client, _server_ask("what is on today?", interaction="73"), discord_key)
    drain()
    posted = [r.json for r in platform.sent(r"/discord/api/v10/channels/555/messages")]
    assert len(posted) == 2 and all(len(p["content"]) <= 2000 for p in posted)
    assert [p["content"].startswith(f"<@{ALICE_DISCORD}>") for p in posted] == [True, False]
    assert [p["allowed_mentions"] for p in posted] == [{"parse": [], "users": [ALICE_DISCORD]}, {"parse": []}]


def test_a_late_answer_to_an_ask_in_a_group_dm_comes_in_the_askers_dm_with_the_bot(
    client, world, discord, discord_key, platform, model_server, drain  # noqa: F811
):
    """A user-installed app's bot cannot post in a group DM: the late answer ended "not
    delivered", and the person who asked never had it."""
    _late(platform)
    platform.default(r"/channels/777/messages", Canned(403, {"message": "Missing Access", "code": 50001}))
    platform.default(r"/users/@me/channels", Canned(200, {"id": "4242", "type": 1}))
    pair(world, "discord", ALICE_DISCORD, world.alice)
    model_server.default = reply("Pier 3, at seven.")
    post_discord(client, ask("when does the boat leave?", context=2, channel_id="777", interaction="74"), discord_key)
    drain()
    (opened,) = platform.sent(r"/users/@me/channels")
    assert opened.json == {"recipient_id": ALICE_DISCORD}
    assert opened.headers["Authorization"] == "Bot discord-bot-token"
    (dm,) = platform.sent(r"/discord/api/v10/channels/4242/messages")
    assert "“when does the boat leave?”" in dm.json["content"] and "group chat" in dm.json["content"]
    assert dm.json["content"].endswith("\nPier 3, at seven.")
    assert platform.sent(r"/channels/777/messages") == []  # the bot is no member there: not tried
    assert OutboundDelivery.objects.get().state == OutboundDelivery.State.SENT


def test_a_late_answer_in_a_server_channel_the_bot_cannot_post_in_comes_in_the_askers_dm(
    client, world, discord, discord_key, platform, model_server, drain  # noqa: F811
):
    """The app installed on Alice's account, not in the server: Discord refuses the bot."""
    _late(platform)
    platform.default(r"/channels/555/messages", Canned(403, {"message": "Missing Access", "code": 50001}))
    platform.default(r"/users/@me/channels", Canned(200, {"id": "4242", "type": 1}))
    pair(world, "discord", ALICE_DISCORD, world.alice)
    model_server.default = reply("Three meetings.")
    post_discord(client, _server_ask("what is on today?", interaction="75"), discord_key)
    drain()
    (dm,) = platform.sent(r"/discord/api/v10/channels/4242/messages")
    assert "“what is on today?”" in dm.json["content"] and dm.json["content"].endswith("\nThree meetings.")
    assert OutboundDelivery.objects.get().state == OutboundDelivery.State.SENT


def test_a_late_answer_to_an_ask_stored_before_askers_were_named_is_posted_in_its_chat_as_before(
    world, discord, platform  # noqa: F811
):
    from channels_app.adapters import adapter_for

    _late(platform)
    adapter_for("discord").send(discord, "followup:555:token-80", "Three meetings.")
    (posted,) = platform.sent(r"/discord/api/v10/channels/555/messages")
    assert posted.json == {"content": "Three meetings.", "allowed_mentions": {"parse": []}}


def test_an_ask_whose_answer_discord_refuses_ends_with_our_notice_that_it_did_not_get_there(
    client, world, discord, discord_key, platform, model_server, drain  # noqa: F811
):
    """The answer goes to the /ask's interaction, not to a chat the pairing names: the
    notice follows it there, as the person who asked is still paired."""
    model_server.default = reply("Three meetings.")
    platform.script(FOLLOWUP, Canned(status=400, body={"message": "Invalid Form Body", "code": 50035}))
    _ask(client, world, discord_key)
    drain()
    answer, notice = _followed_up(platform)
    assert answer == "Three meetings." and notice.startswith("My last reply may not have reached you.")
    assert "50035" not in notice and "Invalid" not in notice


@pytest.mark.parametrize("answer", ["Three meetings.", "All the day's meetings. " * 81],
                         ids=["header-in-the-message", "header-alone-first"])
def test_a_late_answer_retried_after_discord_failed_it_once_says_which_ask_it_answers_once(
    client, world, discord, discord_key, platform, model_server, drain, settings, answer  # noqa: F811
):
    """Discord answers the message carrying the answer with a 500 once, then takes it: the
    person reads the line naming their /ask once, however the first try went out (that
    line in the answer's own message, or before it on its own when both would pass
    Discord's 2,000 characters)."""
    settings.QORVEN_SEND_BACKOFF = 0.05
    _late(platform)
    alone = len(answer) > 1800
    channel = r"/discord/api/v10/channels/555/messages"
    down = Canned(500, {"message": "500: Internal Server Error", "code": 0})
    platform.script(channel, *([Canned(200, {"id": "801"})] if alone else []), down)
    platform.default(channel, Canned(200, {"id": "802"}))
    pair(world, "discord", ALICE_DISCORD, world.alice)
    model_server.default = reply(answer)
    post_discord(client, _server_ask("what is on today?", interaction="76"), discord_key)
    drain()
    posted = [r.json["content"] for r in platform.sent(channel)]
    header = f"<@{ALICE_DISCORD}> answering your /ask “what is on today?”:"
    # The request Discord failed (which delivered nothing) is sent again as it was, alone.
    refused = answer if alone else f"{header}\n{answer}"
    assert posted == [*([header] if alone else []), refused, refused]
    assert OutboundDelivery.objects.get().state == OutboundDelivery.State.SENT
