"""A stranger's /ask in a DM with the bot, where the binding chose to say nothing: Discord
shows the deferred answer as thinking until it is followed up, so the thinking is taken
away, and nothing is said."""
from __future__ import annotations

import pytest

from channels_app.models import Identity
from channels_app.services import binding_create
from sessions_app.models import Message

from ..fakes.model_server import reply
from .test_group_privacy import ALICE_DISCORD, ask
from .test_slack_discord_email_sms import discord_key, post_discord  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def bind_discord(world, discord_key):  # noqa: F811
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    public = discord_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
    return lambda unpaired: binding_create(
        tenant=world.tenant_a, qor=world.qor_a, kind="discord", unpaired_response=unpaired,
        credentials={"application_id": "9001", "public_key": public, "bot_token": "discord-bot-token"})


def _said(platform) -> list[str]:
    return [r.json["content"] for r in platform.sent(r"/discord/api/v10/") if r.method == "POST"]


def _withdrawn(platform) -> list[str]:
    return [r.path.removeprefix("/discord/api/v10") for r in platform.sent(r"/discord/api/v10/")
            if r.method == "DELETE"]


@pytest.mark.parametrize("unpaired", ["ignore", "silent"])
def test_a_strangers_ask_in_a_dm_under_a_silent_binding_stops_thinking_and_says_nothing(
    client, world, bind_discord, discord_key, platform, model_server, drain, unpaired  # noqa: F811
):
    """The interaction was deferred and then left alone: the person watched the bot think
    until Discord gave up."""
    bind_discord(unpaired)
    model_server.default = reply("answered")
    assert post_discord(client, ask("what's up?", context=1, interaction="31"), discord_key).json() == {"type": 5}
    drain()
    assert _said(platform) == []
    assert _withdrawn(platform) == ["/webhooks/9001/token-31/messages/@original"]
    assert model_server.requests == [] and not Message.objects.exists()


def test_a_strangers_second_ask_before_the_code_is_sent_again_stops_thinking_too(
    client, world, bind_discord, discord_key, platform, model_server, drain  # noqa: F811
):
    """The first ask gets the pairing code; one asked again soon after gets no second code
    (QORVEN_PAIRING_RESEND), and was left thinking."""
    bind_discord("code")
    post_discord(client, ask("hello?", context=1, interaction="41"), discord_key)
    drain()
    post_discord(client, ask("hello??", context=1, interaction="42"), discord_key)
    drain()
    (code,) = _said(platform)
    assert "code" in code.lower()
    assert _withdrawn(platform) == ["/webhooks/9001/token-42/messages/@original"]
    assert model_server.requests == []


def test_a_denied_senders_ask_stops_thinking(
    client, world, bind_discord, discord_key, platform, model_server, drain  # noqa: F811
):
    bind_discord("code")
    Identity.objects.create(tenant=world.tenant_a, channel="discord", external_id=ALICE_DISCORD,
                            approval=Identity.Approval.DENIED)
    post_discord(client, ask("let me in", context=1, interaction="51"), discord_key)
    drain()
    assert _said(platform) == [] and _withdrawn(platform) == ["/webhooks/9001/token-51/messages/@original"]


def test_an_ask_taken_just_before_the_binding_was_switched_off_stops_thinking(
    client, world, bind_discord, discord_key, platform, model_server, drain  # noqa: F811
):
    """Accepted by the webhook, then the binding was disabled before its task ran: nothing
    is answered on a switched-off binding, and the deferred answer was left thinking."""
    from django.db import transaction

    from channels_app.inbound import InboundMessage
    from channels_app.models import ChannelBinding
    from channels_app.receive import inbound_receive

    from .conftest import pair

    binding = bind_discord("code")
    pair(world, "discord", ALICE_DISCORD, world.alice)
    with transaction.atomic():  # its task is queued once this commits: after the switch
        inbound_receive(binding=binding, message=InboundMessage(
            channel="discord_dm", external_id="interaction:61", sender_id=ALICE_DISCORD, text="still there?",
            reply_target="followup:token-61"))
        ChannelBinding.objects.filter(pk=binding.pk).update(enabled=False)
    drain()
    assert _said(platform) == [] and model_server.requests == []
    assert _withdrawn(platform) == ["/webhooks/9001/token-61/messages/@original"]


@pytest.mark.parametrize("unpaired", ["ignore", "code"])
def test_a_former_members_ask_is_told_once_or_stops_thinking(
    client, world, bind_discord, discord_key, platform, model_server, drain, unpaired  # noqa: F811
):
    """Someone paired who has left the workspace: a binding that answers strangers tells
    them they no longer have access; one that ignores strangers says nothing, and the
    deferred /ask is taken away rather than left thinking."""
    from tenancy.models import Membership

    bind_discord(unpaired)
    Identity.objects.create(tenant=world.tenant_a, channel="discord", external_id=ALICE_DISCORD, user=world.alice,
                            approval=Identity.Approval.APPROVED)
    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).delete()
    model_server.default = reply("answered")
    post_discord(client, ask("still there?", context=1, interaction="71"), discord_key)
    drain()
    told, withdrawn = _said(platform), _withdrawn(platform)
    if unpaired == "code":
        assert told == ["You no longer have access to this workspace."] and withdrawn == []
    else:
        assert told == [] and withdrawn == ["/webhooks/9001/token-71/messages/@original"]
    assert model_server.requests == [] and not Message.objects.exists()
