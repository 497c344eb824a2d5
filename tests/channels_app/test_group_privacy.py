"""What a member keeps private stays out of conversations others read."""
from __future__ import annotations

import pytest

from memory_app.services import memory_add
from sessions_app.models import Message, Session

from ..fakes.model_server import reply
from .conftest import pair
from .test_slack_discord_email_sms import discord, discord_key, post_discord  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

ALICE_DISCORD = "80351110224678912"


def ask(question: str, *, context: int, channel_id: str = "555", interaction: str = "1234567890") -> dict:
    """An `/ask` interaction as Discord sends it for an app people install on their own
    account: `context` 1 is the person's DM with the bot, 2 a group DM or a DM with someone
    else, where everyone in it reads the answer."""
    return {
        "id": interaction, "application_id": "9001", "type": 2, "token": f"token-{interaction}", "version": 1,
        "context": context, "channel_id": channel_id, "channel": {"id": channel_id, "type": 3 if context == 2 else 1},
        "user": {"id": ALICE_DISCORD, "username": "alice", "global_name": "Alice"},
        "authorizing_integration_owners": {"1": ALICE_DISCORD},
        "data": {"id": "77", "name": "ask", "type": 1, "options": [{"name": "question", "type": 3, "value": question}]},
    }


def test_an_ask_in_a_group_dm_is_answered_as_in_a_group_not_from_the_askers_private_chat(
    client, world, discord, discord_key, platform, model_server, drain  # noqa: F811
):
    """Alice's own /ask in a group DM was taken for her DM with the bot: answered from her
    private chat — her memories, her conversation, the tools of her owner trust — with the
    answer posted where everyone in the group DM reads it."""
    pair(world, "discord", ALICE_DISCORD, world.alice)
    memory_add(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, type="fact",
               content="Alice's salary is 140k and her lawyer meets her on Friday", channels=["discord_dm"])
    model_server.default = reply("Here you go.")
    assert post_discord(client, ask("when does my lawyer meet me? salary?", context=1, interaction="1"),
                        discord_key).json() == {"type": 5}
    drain()
    private = model_server.requests[-1]
    assert "lawyer meets her on Friday" in private["messages"][0]["content"]  # her own DM: her memories

    assert post_discord(client, ask("when does my lawyer meet me? salary?", context=2, channel_id="777",
                                    interaction="2"), discord_key).json() == {"type": 5}
    drain()
    shared = model_server.requests[-1]
    assert "lawyer meets her on Friday" not in shared["messages"][0]["content"]
    assert [m["content"] for m in shared["messages"][1:]] == ["[discord] Alice: when does my lawyer meet me? salary?"]
    assert {t["function"]["name"] for t in shared.get("tools", [])} <= {"current_time", "read_skill"}
    group = Session.objects.get(kind="group")
    assert (group.channel, group.external_thread_id) == ("discord", "777")
    canonical = Session.objects.get(kind="canonical", user=world.alice)
    assert Message.objects.filter(session=canonical).count() == 2  # the first ask and its answer only
    assert [s.json["content"] for s in platform.sent(r"/webhooks/9001/token-2")] == ["Here you go."]
