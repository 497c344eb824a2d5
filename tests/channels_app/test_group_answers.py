"""Who the Qor answers in a group chat: by default only people paired with it. Anyone can
make a group and add the bot: a stranger's mention there is the group's context, and
never a model call paid by the host (ChannelBinding.group_answers)."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from channels_app.adapters import adapter_for
from channels_app.models import ChannelBinding, Identity, InboundEvent, PairingRequest
from channels_app.receive import gateway_frame_receive
from channels_app.services import binding_create
from sessions_app.models import Message
from tenancy.models import Membership

from ..fakes.model_server import reply
from .conftest import pair
from .payloads import post_telegram, telegram_update
from .test_group_privacy import ask
from .test_slack_discord_email_sms import (  # noqa: F401 (fixtures)
    DM_CREATE,
    discord,
    discord_key,
    post_discord,
    post_slack,
    slack,
    slack_event,
)

pytestmark = pytest.mark.django_db(transaction=True)

GROUP = dict(chat_id=-1009, chat_type="supergroup")


def _group_messages() -> list[tuple[str, str]]:
    return list(Message.objects.filter(session__kind="group").order_by("seq").values_list("role", "content"))


@pytest.mark.parametrize("unpaired", ["code", "silent", "ignore"])
def test_a_strangers_mention_in_a_telegram_group_is_kept_as_context_and_never_reaches_the_model(
    client, world, platform, model_server, drain, unpaired
):
    """A stranger made a group, added the bot and mentioned it: the model answered at the
    host's expense, with no pairing and no owner's approval — a binding made to ignore
    unknown senders included."""
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram", unpaired_response=unpaired,
                   credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    model_server.default = reply("answered")
    post_telegram(client, telegram_update("@aria_bot hi", user_id=77, first_name="Carol", **GROUP))
    post_telegram(client, telegram_update("/status@aria_bot", user_id=77, first_name="Carol", message_id=2,
                                          **GROUP))
    drain()
    assert model_server.requests == []
    assert platform.sent("sendMessage") == []  # no answer, no pairing code in the group
    assert _group_messages() == [("user", "@aria_bot hi"), ("user", "/status@aria_bot")]  # the group's context
    assert not PairingRequest.objects.exists()
    assert set(InboundEvent.objects.values_list("result", flat=True)) == {"group-unpaired"}


def test_a_paired_members_mention_in_a_telegram_group_is_answered(client, world, telegram, platform, model_server,
                                                                   drain):
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("Hi all!")
    post_telegram(client, telegram_update("dinner at 8?", user_id=77, first_name="Carol", **GROUP))
    drain()  # two senders' messages are processed side by side: Carol's is stored first here
    post_telegram(client, telegram_update("@aria_bot hi", first_name="Alice", message_id=2, **GROUP))
    drain()
    (asked,) = model_server.requests
    assert [m["content"] for m in asked["messages"][1:]] == ["[telegram] Carol: dinner at 8?",
                                                             "[telegram] Alice: @aria_bot hi"]
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["Hi all!"]


def test_a_binding_that_answers_anyone_in_groups_answers_a_stranger_as_before(client, world, platform, model_server,
                                                                              drain):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram", group_answers="anyone",
                   credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    model_server.default = reply("Hello Carol")
    post_telegram(client, telegram_update("@aria_bot hi", user_id=77, first_name="Carol", **GROUP))
    drain()
    (asked,) = model_server.requests
    assert {t["function"]["name"] for t in asked.get("tools", [])} <= {"current_time", "read_skill"}  # public trust
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["Hello Carol"]
    assert InboundEvent.objects.get().result == "group"


def _deny(world, identity):
    Identity.objects.filter(pk=identity.pk).update(approval=Identity.Approval.DENIED)


def _unpair(world, identity):
    Identity.objects.filter(pk=identity.pk).update(user=None, approval=Identity.Approval.PENDING)


def _remove(world, identity):
    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).delete()


def _deactivate(world, identity):
    world.alice.is_active = False
    world.alice.save(update_fields=["is_active"])


@pytest.mark.parametrize("revoke", [_deny, _unpair, _remove, _deactivate])
def test_a_member_whose_pairing_or_membership_is_gone_is_a_stranger_in_the_group_again(
    client, world, telegram, platform, model_server, drain, revoke
):
    identity = pair(world, "telegram", "42", world.alice)
    revoke(world, identity)
    model_server.default = reply("answered")
    post_telegram(client, telegram_update("@aria_bot hi", first_name="Alice", **GROUP))
    drain()
    assert model_server.requests == [] and platform.sent("sendMessage") == []
    assert _group_messages() == [("user", "@aria_bot hi")]
    assert "user_id" not in Message.objects.get().metadata  # no digest of the group in her memory


def test_a_strangers_mention_in_a_slack_channel_is_kept_and_a_members_is_answered(
    client, world, slack, platform, model_server, drain  # noqa: F811
):
    model_server.default = reply("On it.")
    post_slack(client, slack_event("<@UBOT> book a table", channel_type="channel", channel="C0GEN",
                                   user="U0STRANGER", event_id="Ev1", kind="app_mention"))
    drain()
    assert model_server.requests == [] and platform.sent("chat.postMessage") == []
    assert _group_messages() == [("user", "<@UBOT> book a table")]

    pair(world, "slack", "U0PRIYA", world.alice)
    post_slack(client, slack_event("<@UBOT> for two", channel_type="channel", channel="C0GEN", event_id="Ev2",
                                   kind="app_mention"))
    drain()
    assert len(model_server.requests) == 1
    assert [s.json["text"] for s in platform.sent("chat.postMessage")] == ["On it."]


def test_a_strangers_ask_in_a_discord_server_is_not_answered_and_a_members_is(
    client, world, discord, discord_key, platform, model_server, drain  # noqa: F811
):
    model_server.default = reply("Here you go.")
    stranger = {**ask("what's up?", context=0, interaction="1"), "guild_id": "3333"}
    stranger["user"] = {"id": "111", "username": "mallory"}
    assert post_discord(client, stranger, discord_key).json() == {"type": 5}
    drain()
    # Discord shows "thinking…" until the deferred interaction is followed up: the stranger
    # is told, in our words, rather than left waiting until Discord gives up.
    assert model_server.requests == []
    assert [s.json["content"] for s in platform.sent(r"/webhooks/9001/")] == [
        f"Only people paired with {world.qor_a.name} are answered here."]
    assert _group_messages() == [("user", "what's up?")]

    pair(world, "discord", "80351110224678912", world.alice)
    member = {**ask("and now?", context=0, interaction="2"), "guild_id": "3333"}
    assert post_discord(client, member, discord_key).json() == {"type": 5}
    drain()
    assert [s.json["content"] for s in platform.sent(r"/webhooks/9001/token-2")] == ["Here you go."]


def test_a_strangers_mention_on_a_discord_server_through_the_gateway_is_kept_and_not_answered(
    world, discord, platform, model_server, drain  # noqa: F811
):
    model_server.default = reply("Hi")
    mention = {**DM_CREATE, "guild_id": "3333", "id": "2", "content": "<@9001> help",
               "author": {"id": "555", "username": "mallory"}, "mentions": [{"id": "9001", "bot": True}]}
    gateway_frame_receive(binding=discord, frame={"t": "MESSAGE_CREATE", "d": mention}, bot_id="9001")
    drain()
    assert model_server.requests == [] and platform.sent(r"/channels/") == []
    assert _group_messages() == [("user", "<@9001> help")]

    discord.group_answers = ChannelBinding.GroupAnswers.ANYONE
    discord.save(update_fields=["group_answers"])
    again = adapter_for("discord").from_gateway(discord, {**mention, "id": "3"}, "9001")
    assert again is not None and again.addressed
    gateway_frame_receive(binding=discord, frame={"t": "MESSAGE_CREATE", "d": {**mention, "id": "3"}}, bot_id="9001")
    drain()
    assert len(model_server.requests) == 1
    assert [s.json["content"] for s in platform.sent(r"/channels/")] == ["Hi"]


def test_bind_sets_who_is_answered_in_groups_and_keeps_it_when_run_again(world):
    args = ["bind", "telegram", "--tenant", "acme", "--qor", "aria", "--token", "111:AAA", "--secret", "tg-secret-a"]
    call_command(*args, stdout=io.StringIO())
    assert ChannelBinding.objects.get().group_answers == "paired"
    call_command(*args, "--groups", "anyone", stdout=io.StringIO())
    assert ChannelBinding.objects.get().group_answers == "anyone"
    call_command(*args, "--name", "family bot", stdout=io.StringIO())  # run again for something else
    assert ChannelBinding.objects.get().group_answers == "anyone"


def test_bind_run_again_without_unpaired_keeps_what_unknown_senders_get(world):
    """It went back to a pairing code: a binding set to ignore unknown senders started
    answering strangers with codes after a bind run for another reason."""
    args = ["bind", "telegram", "--tenant", "acme", "--qor", "aria", "--token", "111:AAA", "--secret", "tg-secret-a"]
    call_command(*args, stdout=io.StringIO())
    assert ChannelBinding.objects.get().unpaired_response == "code"
    call_command(*args, "--unpaired", "ignore", stdout=io.StringIO())
    call_command(*args, "--name", "family bot", stdout=io.StringIO())
    assert ChannelBinding.objects.get().unpaired_response == "ignore"


def test_the_admins_binding_page_sets_who_is_answered_in_groups(client, world, telegram):
    world.alice.is_staff = world.alice.is_superuser = True
    world.alice.save(update_fields=["is_staff", "is_superuser"])
    client.force_login(world.alice)
    page = client.get(f"/admin/channels_app/channelbinding/{telegram.pk}/change/").content.decode()
    assert 'name="group_answers"' in page and "only people paired with the Qor" in page
    response = client.post(f"/admin/channels_app/channelbinding/{telegram.pk}/change/", {
        "tenant": world.tenant_a.pk, "qor": world.qor_a.pk, "name": telegram.name, "unpaired_response": "code",
        "group_answers": "anyone", "enabled": "on", "cred_telegram_token": "", "cred_telegram_secret": "",
        "cred_telegram_username": "aria_bot",
    })
    assert response.status_code == 302, response.content.decode()[:2000]
    telegram.refresh_from_db()
    assert telegram.group_answers == "anyone"
