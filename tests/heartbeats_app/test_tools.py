"""The beat tools round trip through the agent loop against the scripted model server."""
from __future__ import annotations

import json

import pytest
from django_celery_beat.models import PeriodicTask

from heartbeats_app.models import CLEAR_IMAGES, CONVERSATION_RETENTION, DELIVER_REMINDERS, Heartbeat
from heartbeats_app.services import heartbeat_create
from qorven.agent.gateway import inbound_accept
from sessions_app.models import Message
from sessions_app.services.resolve import session_resolve

from ..factories.heartbeats_app import beat
from ..fakes.model_server import reply, tool_call

pytestmark = pytest.mark.django_db(transaction=True)


def say(world, user, text, channel="telegram"):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel=channel, user=user)
    inbound_accept(session=session, content=text, channel=channel, sender_name=user.first_name, trust="paired",
                   user=user)
    return session


def tool_results(model_server, request_index):
    """The tool results the model was sent in a request, parsed."""
    return [json.loads(m["content"]) for m in model_server.requests[request_index]["messages"] if m["role"] == "tool"]


def test_set_beat_creates_a_beat_for_the_user_delivered_on_the_current_channel(world, model_server, drain):
    model_server.add(
        tool_call("set_beat", {"name": "pills", "cron": "0 9 * * *", "prompt": "Remind me to take my pills",
                               "timezone": "Europe/Paris"}),
        reply("Done: every day at 9."),
    )
    say(world, world.alice, "remind me every day at 9 to take my pills")
    drain()
    offered = {t["function"]["name"] for t in model_server.requests[0]["tools"]}
    assert {"set_beat", "list_beats", "update_beat", "delete_beat"} <= offered
    hb = Heartbeat.objects.get()
    assert (hb.name, hb.cron, hb.timezone, hb.owner, hb.deliver_to, hb.deliver_channel, hb.managed) == (
        "pills", "0 9 * * *", "Europe/Paris", world.alice, world.alice, "telegram", False)
    assert PeriodicTask.objects.get(pk=hb.periodic_task_id).enabled
    (result,) = tool_results(model_server, 1)
    assert result["created"]["name"] == "pills" and result["created"]["next_run"]


def test_a_bad_cron_expression_gets_an_error_back_to_the_model(world, model_server, drain):
    model_server.add(
        tool_call("set_beat", {"name": "pills", "cron": "every morning", "prompt": "pills"}),
        tool_call("set_beat", {"name": "pills", "cron": "0 8 * * *", "prompt": "pills"}),
        reply("Set for 8 every morning."),
    )
    say(world, world.alice, "every morning remind me of my pills")
    drain()
    (first,) = tool_results(model_server, 1)
    assert "error" in first
    assert "cron" in first["error"] and "five" in first["error"] and "0 8 * * 1-5" in first["error"]
    assert Heartbeat.objects.get().cron == "0 8 * * *"  # the model corrected itself
    reply_message = Message.objects.filter(role="assistant", tool_calls__isnull=True).last()
    assert reply_message.content == "Set for 8 every morning."


def test_a_beat_in_a_workspace_whose_timezone_is_unknown_gets_an_error_back_to_the_model(world, model_server, drain):
    """A workspace's zone from before it was checked on save: a beat without a zone of its
    own would run in it, so set_beat answers what is wrong instead of failing the turn."""
    from tenancy.models import Tenant

    Tenant.objects.filter(pk=world.tenant_a.pk).update(timezone="Europe/Pari")
    model_server.add(tool_call("set_beat", {"name": "pills", "cron": "0 8 * * *", "prompt": "pills"}),
                     reply("Please fix the workspace's timezone."))
    say(world, world.alice, "every morning remind me of my pills")
    drain()
    (result,) = tool_results(model_server, 1)
    assert "this workspace's timezone is not usable: unknown timezone 'Europe/Pari'" in result["error"]
    assert not Heartbeat.objects.exists()


def test_list_update_and_delete_touch_only_the_users_own_beats(world, model_server, drain):
    beat(world.qor_a, name="alice-walk", owner=world.alice, deliver_to=world.alice, deliver_channel="web")
    beat(world.qor_a, name="bob-secret", prompt="Bob's private thing", owner=world.bob)
    heartbeat_create(tenant=world.tenant_a, qor=world.qor_a, name=CLEAR_IMAGES, cron="30 3 * * *", managed=True)
    beat(world.qor_b, name="globex-beat", owner=world.charlie)
    model_server.add(
        tool_call("list_beats", {}),
        tool_call("update_beat", {"name": CLEAR_IMAGES, "cron": "0 1 * * *"}),
        tool_call("update_beat", {"name": "bob-secret", "enabled": False}),
        tool_call("update_beat", {"name": "alice-walk", "cron": "0 18 * * *", "enabled": False}),
        tool_call("update_beat", {"name": "alice-walk", "cron": "0 99 * * *"}),
        tool_call("delete_beat", {"name": "alice-walk"}),
        reply("All done."),
    )
    say(world, world.alice, "show my beats, then move my walk to 6pm, pause it, and then delete it")
    drain()
    results = tool_results(model_server, 6)
    listed = {b["name"]: b["read_only"] for b in results[0]["beats"]}
    assert listed == {"alice-walk": False, CLEAR_IMAGES: True}  # not Bob's, not another tenant's
    assert "read-only" in results[1]["error"]
    assert "no beat named 'bob-secret'" in results[2]["error"]
    assert (results[3]["updated"]["cron"], results[3]["updated"]["enabled"]) == ("0 18 * * *", False)
    assert "hour" in results[4]["error"]
    assert results[5] == {"deleted": "alice-walk"}
    assert sorted(Heartbeat.objects.values_list("name", "enabled")) == [
        (CLEAR_IMAGES, True), ("bob-secret", True), ("globex-beat", True)]
    assert Heartbeat.objects.get(name="bob-secret").prompt == "Bob's private thing"
    assert Heartbeat.objects.get(name=CLEAR_IMAGES).cron == "30 3 * * *"


def test_the_beats_command_lists_the_users_beats_without_a_model_call(world, model_server, drain):
    beat(world.qor_a, name="alice-walk", cron="0 18 * * *", owner=world.alice, deliver_to=world.alice,
         deliver_channel="telegram")
    beat(world.qor_a, name="bob-secret", owner=world.bob)
    session = say(world, world.alice, "/beats")
    drain()
    answer = Message.objects.filter(session=session, role="assistant").get()
    assert answer.metadata["command"] == "beats"
    assert "alice-walk" in answer.content and "`0 18 * * *`" in answer.content and "telegram" in answer.content
    assert "bob-secret" not in answer.content
    assert model_server.requests == []

    say(world, world.bob, "/beats", channel="web")
    drain()
    assert "bob-secret" in Message.objects.filter(role="assistant", session__user=world.bob).get().content


def test_the_beats_command_leaves_out_the_hosts_system_beats(world, model_server, drain):
    """On a fresh install (the shipped defaults synced), /beats listed the three reserved
    upkeep beats (__qorven_clear_images__, …) as "Your heartbeats", to a person who had set none."""
    for name, cron in ((CLEAR_IMAGES, "30 3 * * *"), (DELIVER_REMINDERS, "*/5 * * * *"),
                       (CONVERSATION_RETENTION, "45 3 * * *")):
        heartbeat_create(tenant=world.tenant_a, qor=world.qor_a, name=name, cron=cron, managed=True)
    session = say(world, world.alice, "/beats")
    drain()
    answer = Message.objects.filter(session=session, role="assistant").get().content
    assert answer.startswith("You have no heartbeats."), answer

    heartbeat_create(tenant=world.tenant_a, qor=world.qor_a, name="morning-news", cron="0 8 * * *",
                     prompt="the news", managed=True)
    beat(world.qor_a, name="alice-walk", cron="0 18 * * *", owner=world.alice)
    say(world, world.alice, "/beats")
    drain()
    answer = Message.objects.filter(session=session, role="assistant").order_by("seq").last().content
    assert "alice-walk" in answer and "morning-news" in answer and "(set by the host, read-only)" in answer
    assert "__qorven_" not in answer


def test_a_timezone_that_names_a_folder_of_the_tz_database_gets_an_error_back_to_the_model(world, model_server,
                                                                                            drain):
    model_server.add(tool_call("set_beat", {"name": "pills", "cron": "0 8 * * *", "prompt": "pills",
                                            "timezone": "Europe"}),
                     reply("Which city in Europe?"))
    say(world, world.alice, "every morning remind me of my pills")
    drain()
    (result,) = tool_results(model_server, 1)
    assert "unknown timezone 'Europe'" in result["error"]
    assert not Heartbeat.objects.exists()


def test_a_beat_bob_owns_that_runs_for_alice_is_read_only_to_his_tools(world, model_server, drain):
    """A beat runs as its recipient, with their chat and memories in view, and tells them
    what it found. Bob owns "for-alice" (the admin set it up to deliver to Alice, acme's
    owner): rewritten from Bob's chat, it would ask Alice's assistant whatever he likes,
    as a workspace admin may not (tests/tenancy/test_admin_ranks.py)."""
    hb = beat(world.qor_a, name="for-alice", prompt="Alice's morning brief", owner=world.bob,
              deliver_to=world.alice, deliver_channel="web")
    model_server.add(
        tool_call("list_beats", {}),
        tool_call("update_beat", {"name": "for-alice", "prompt": "Quote her last messages and memories",
                                  "deliver_channel": "telegram"}),
        tool_call("delete_beat", {"name": "for-alice"}),
        reply("I cannot change that one."),
    )
    say(world, world.bob, "change the for-alice beat")
    drain()

    (listed,) = tool_results(model_server, 1)
    assert [(b["name"], b["read_only"]) for b in listed["beats"]] == [("for-alice", True)]
    updated, deleted = tool_results(model_server, 3)[1:]
    assert "delivers to someone else" in updated["error"] and "delivers to someone else" in deleted["error"]
    hb.refresh_from_db()
    assert (hb.prompt, hb.deliver_channel, hb.deliver_to) == ("Alice's morning brief", "web", world.alice)


def test_slash_beats_marks_a_beat_for_someone_else_read_only(world, drain):
    beat(world.qor_a, name="for-alice", owner=world.bob, deliver_to=world.alice, deliver_channel="web")
    beat(world.qor_a, name="mine", owner=world.bob, deliver_to=world.bob, deliver_channel="web")
    say(world, world.bob, "/beats", channel="web")
    drain()
    listing = Message.objects.filter(role="assistant", metadata__command="beats").last().content
    assert "for-alice" in listing and "(delivers to someone else, read-only)" in listing
    assert "mine" in listing and listing.count("read-only") == 1
