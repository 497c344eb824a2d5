"""On Slack and WhatsApp a literal *, _, ~ or backtick at a word's edge in our text gets a
zero-width space (U+200B) so it shows as written. A person who copies such text back — a
command, or a cron line from /beats — sends us those invisible characters: a command and
its arguments, and a cron expression, are read without them, while the message is stored
as it came."""
from __future__ import annotations

import pytest

from heartbeats_app.models import Heartbeat
from sessions_app.models import Message
from tenancy.models import Membership

from ..factories.heartbeats_app import beat
from ..fakes.chat_markers import shown
from ..fakes.model_server import reply, tool_call
from .conftest import pair
from .payloads import post_whatsapp, whatsapp_body
from .test_slack_discord_email_sms import post_slack, slack, slack_event  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

ZWSP = "\u200b"


def _sent_on_whatsapp(platform) -> str:
    return platform.sent(r"/whatsapp/v21.0/1055/messages")[-1].json["text"]["body"]


def test_a_cron_copied_from_a_beats_answer_on_whatsapp_sets_the_beat_the_person_saw(
    client, world, whatsapp, platform, model_server, drain
):
    pair(world, "whatsapp", "15550100", world.alice)
    beat(world.qor_a, name="backup", cron="*/30 * * * *", owner=world.alice)
    assert post_whatsapp(client, whatsapp_body("/beats", message_id="wamid.1")).status_code == 200
    drain()
    copied = _sent_on_whatsapp(platform).split("`")[1]  # what a person selects of the cron shown
    assert ZWSP in copied and shown(copied) == "*/30 * * * *"
    model_server.add(tool_call("set_beat", {"name": "stretch", "cron": copied, "prompt": "Time to stretch"}),
                     reply("Done."))
    asked = f"remind me to stretch at {copied} too"
    assert post_whatsapp(client, whatsapp_body(asked, message_id="wamid.2")).status_code == 200
    drain()
    assert Heartbeat.objects.get(name="stretch").cron == "*/30 * * * *"
    assert Message.objects.filter(role="user", content=asked).exists()  # stored as it came
    assert shown(_sent_on_whatsapp(platform)) == "Done."


def test_a_command_copied_with_a_zero_width_space_on_slack_is_answered_as_the_command(
    client, world, slack, platform, model_server, drain  # noqa: F811
):
    pair(world, "slack", "U0PRIYA", world.alice)
    beat(world.qor_a, name="backup", cron="0 3 * * *", owner=world.alice)
    typed = f"{ZWSP}/beats{ZWSP}"  # selected with the backticks' edges of "`/beats`" in our /help
    post_slack(client, slack_event(typed))
    drain()
    assert model_server.requests == []  # a command: answered without the model
    answer = platform.sent("chat.postMessage")[-1].json["text"]
    assert "Your heartbeats:" in answer and "backup" in answer
    assert Message.objects.filter(role="user").get().content == typed


def test_a_commands_arguments_copied_with_zero_width_spaces_are_read_without_them(client, world, whatsapp, platform,
                                                                                model_server, drain):
    pair(world, "whatsapp", "15550100", world.alice)
    assert post_whatsapp(client, whatsapp_body(f"/timezone {ZWSP}Europe/Paris{ZWSP}")).status_code == 200
    drain()
    assert model_server.requests == []
    assert Membership.objects.get(tenant=world.tenant_a, user=world.alice).timezone == "Europe/Paris"
