"""A beat changed or deleted while its run's model call is under way: what the person
decided meanwhile is what its answer follows."""
from __future__ import annotations

import pytest

from heartbeats_app.models import Heartbeat, HeartbeatRun
from heartbeats_app.services import heartbeat_delete, heartbeat_run_now, heartbeat_update
from sessions_app.models import Message

from ..fakes.model_server import reply
from .test_membership_mid_turn import HeldModel

pytestmark = pytest.mark.django_db(transaction=True)


def held_run(model_server, pills):
    held = HeldModel(reply("Time for your pills, Alice!"), reply("unused"))
    model_server.default = held
    heartbeat_run_now(heartbeat=pills)
    assert held.arrived.wait(30), "the beat never called the model"
    return held


def answers():
    """What reached the person: the assistant's messages outside the runs' own sessions."""
    return list(Message.objects.filter(role="assistant").exclude(channel="cron").values_list("channel", "content"))


def test_a_beat_deleted_while_its_model_thinks_delivers_nothing(world, pills, model_server, drain):
    """Alice deleted "pills" (delete_beat) while its run waited on the model: the answer
    still reached her chat and Telegram, from a beat she no longer has."""
    held = held_run(model_server, pills)
    heartbeat_delete(heartbeat=pills)
    held.release.set()
    drain()

    assert answers() == []
    assert not Heartbeat.objects.exists() and not HeartbeatRun.objects.exists()


def test_a_beat_moved_to_another_channel_while_its_model_thinks_delivers_there(world, pills, model_server, drain):
    held = held_run(model_server, pills)
    heartbeat_update(heartbeat=pills, deliver_channel="web")
    held.release.set()
    drain()

    assert answers() == [("web", "Time for your pills, Alice!")]
    assert HeartbeatRun.objects.get().delivered_message.channel == "web"


def test_a_beat_whose_delivery_was_turned_off_while_its_model_thinks_only_records(world, pills, model_server, drain):
    held = held_run(model_server, pills)
    heartbeat_update(heartbeat=pills, deliver_to=None, deliver_channel="")
    held.release.set()
    drain()

    assert answers() == []
    run = HeartbeatRun.objects.get()
    assert (run.status, run.output, run.delivered_message) == ("ok", "Time for your pills, Alice!", None)


def test_a_beat_paused_while_its_scheduled_run_thinks_delivers_nothing(world, pills, model_server, drain):
    """Alice said "stop the pill reminders" (update_beat enabled=false) while this tick's
    run waited on the model: the reminder still came, seconds after she paused it."""
    from celery import current_app

    from heartbeats_app.services import RUN_TASK

    held = HeldModel(reply("Time for your pills, Alice!"), reply("unused"))
    model_server.default = held
    current_app.send_task(RUN_TASK, kwargs={"tenant_id": pills.tenant_id, "heartbeat_id": pills.pk})  # as beat does
    assert held.arrived.wait(30), "the beat never called the model"
    heartbeat_update(heartbeat=pills, enabled=False)
    held.release.set()
    drain()

    assert answers() == []
    run = HeartbeatRun.objects.get()
    assert (run.status, run.delivered_message) == ("ok", None) and "paused" in run.error


def test_a_paused_beat_run_now_still_delivers(world, pills, model_server, drain):
    heartbeat_update(heartbeat=pills, enabled=False)
    model_server.add(reply("Time for your pills, Alice!"))
    heartbeat_run_now(heartbeat=pills)
    drain()

    assert answers() == [("telegram", "Time for your pills, Alice!")]


def test_a_beat_given_to_another_recipient_while_its_model_thinks_delivers_to_no_one(host, world, pills,
                                                                                     model_server, drain):
    """The run read Alice's chat and ran her tools (it runs as its recipient); the admin
    gave the beat to Bob meanwhile. What was written for Alice, from her data, must not
    reach Bob: the next run is his."""
    from django.urls import reverse

    from ..admin_forms import served_form

    held = held_run(model_server, pills)
    url = reverse("admin:heartbeats_app_heartbeat_change", args=(pills.pk,))
    page = host.get(url)
    saved = host.post(url, {**served_form(page), "owner": world.bob.pk, "deliver_to": world.bob.pk})
    assert saved.status_code == 302
    held.release.set()
    drain()

    assert answers() == []
    run = HeartbeatRun.objects.get()
    assert (run.status, run.output, run.delivered_message) == ("ok", "Time for your pills, Alice!", None)
    assert "not delivered" in run.error and "bob" in run.error
