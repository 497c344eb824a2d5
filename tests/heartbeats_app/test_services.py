"""Heartbeats are mirrored one-to-one onto django-celery-beat, in the same transaction."""
from __future__ import annotations

import json

import pytest
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from heartbeats_app import services
from heartbeats_app.errors import HeartbeatInvalid, HeartbeatReadOnly
from heartbeats_app.models import CLEAR_IMAGES, Heartbeat
from heartbeats_app.services import (
    heartbeat_create,
    heartbeat_delete,
    heartbeat_set_enabled,
    heartbeat_update,
)

from ..factories.heartbeats_app import beat

pytestmark = pytest.mark.django_db


def test_a_new_beat_gets_a_periodic_task_running_it_in_the_tenants_timezone(world):
    world.tenant_a.timezone = "Europe/Paris"
    world.tenant_a.save()
    hb = beat(world.qor_a, cron="30 7 * * 1-5", owner=world.alice)
    task = hb.periodic_task
    assert task.task == "heartbeats_app.run"
    assert json.loads(task.kwargs) == {"tenant_id": world.tenant_a.pk, "heartbeat_id": hb.pk}
    assert task.enabled
    cron = task.crontab
    assert (cron.minute, cron.hour, cron.day_of_month, cron.month_of_year, cron.day_of_week) == ("30", "7", "*", "*", "1-5")
    assert str(cron.timezone) == "Europe/Paris"


def test_a_beats_own_timezone_wins_over_the_tenants(world):
    hb = beat(world.qor_a, timezone="Asia/Tokyo")
    assert str(hb.periodic_task.crontab.timezone) == "Asia/Tokyo"


def test_changing_a_beat_changes_its_task_and_pausing_disables_it(world):
    hb = beat(world.qor_a, cron="0 8 * * *")
    old_crontab = hb.periodic_task.crontab_id
    hb = heartbeat_update(heartbeat=hb, cron="15 9 * * 1", timezone="America/New_York", prompt="New prompt")
    task = PeriodicTask.objects.get(pk=hb.periodic_task_id)
    assert (task.crontab.minute, task.crontab.hour, task.crontab.day_of_week) == ("15", "9", "1")
    assert str(task.crontab.timezone) == "America/New_York"
    assert not CrontabSchedule.objects.filter(pk=old_crontab).exists()  # no longer used by anything
    heartbeat_set_enabled(heartbeat=hb, enabled=False)
    assert not PeriodicTask.objects.get(pk=hb.periodic_task_id).enabled
    heartbeat_set_enabled(heartbeat=hb, enabled=True)
    assert PeriodicTask.objects.get(pk=hb.periodic_task_id).enabled


def test_deleting_a_beat_removes_its_task(world):
    hb = beat(world.qor_a)
    task_id = hb.periodic_task_id
    heartbeat_delete(heartbeat=hb)
    assert not Heartbeat.objects.exists()
    assert not PeriodicTask.objects.filter(pk=task_id).exists()


def test_a_failure_while_mirroring_leaves_both_the_beat_and_its_task_unchanged(world, monkeypatch):
    hb = beat(world.qor_a, cron="0 8 * * *")

    def broken(beat):
        raise RuntimeError("celery-beat tables unavailable")

    monkeypatch.setattr(services, "_mirror", broken)
    with pytest.raises(RuntimeError):
        heartbeat_update(heartbeat=hb, cron="0 9 * * *")
    with pytest.raises(RuntimeError):
        heartbeat_create(tenant=world.tenant_a, qor=world.qor_a, name="second", cron="0 9 * * *", prompt="p")
    hb.refresh_from_db()
    assert hb.cron == "0 8 * * *"
    assert list(Heartbeat.objects.values_list("name", flat=True)) == ["check-in"]
    assert PeriodicTask.objects.get(pk=hb.periodic_task_id).crontab.hour == "8"


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"cron": "every day"}, "cron"),
        # Longer than the beat's column (100), or a field than django-celery-beat's (64 a weekday's)
        ({"cron": "0 8 1" + ",1" * 60 + " * *"}, "cron"),
        ({"cron": "0 8 * * " + ",".join(["1-5"] * 20)}, "cron"),
        ({"cron": "0 8 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"timezone": "localtime"}, "timezone"),  # this server's clock, no zone of the tz database
        ({"timezone": "right/Europe/Paris"}, "timezone"),
        ({"prompt": "  "}, "prompt"),
        ({"deliver_channel": "email"}, "deliver_channel"),
        ({"name": "__qorven_anything"}, "name"),
        ({"name": CLEAR_IMAGES}, "name"),
    ],
)
def test_invalid_beats_are_refused_naming_the_field(world, changes, field):
    args = {"name": "x", "cron": "0 8 * * *", "prompt": "p", **changes}
    if "deliver_channel" in changes:
        args["deliver_to"] = world.alice
    with pytest.raises(HeartbeatInvalid) as raised:
        heartbeat_create(tenant=world.tenant_a, qor=world.qor_a, **args)
    assert raised.value.field == field
    assert not Heartbeat.objects.exists() and not PeriodicTask.objects.exists()


def test_the_lengths_a_cron_is_held_to_are_those_its_columns_take():
    from heartbeats_app.cron import EXPRESSION_MAX, FIELD_MAX, FIELDS

    assert EXPRESSION_MAX == Heartbeat._meta.get_field("cron").max_length
    assert FIELD_MAX == {name: CrontabSchedule._meta.get_field(name).max_length for name in FIELDS}


def test_a_delivery_target_must_be_a_member_and_the_qor_of_the_tenant(world):
    with pytest.raises(HeartbeatInvalid, match="not a member"):
        beat(world.qor_a, deliver_to=world.charlie, deliver_channel="telegram")
    with pytest.raises(HeartbeatInvalid, match="another tenant"):
        heartbeat_create(tenant=world.tenant_a, qor=world.qor_b, name="x", cron="0 8 * * *", prompt="p")


def test_a_deactivated_member_is_refused_as_a_delivery_target_and_nothing_is_made(world):
    """Delivery to a deactivated account never happens: the beat would run, spend tokens
    and reach no one."""
    world.bob.is_active = False
    world.bob.save(update_fields=["is_active"])
    with pytest.raises(HeartbeatInvalid, match="bob is deactivated") as refused:
        beat(world.qor_a, name="for-bob", deliver_to=world.bob, deliver_channel="telegram")
    assert refused.value.field == "deliver_to"
    assert not Heartbeat.objects.filter(name="for-bob").exists() and not PeriodicTask.objects.filter(
        name__contains="for-bob").exists()
    mine = beat(world.qor_a, name="mine", deliver_to=world.alice, deliver_channel="web")
    with pytest.raises(HeartbeatInvalid, match="bob is deactivated"):
        heartbeat_update(heartbeat=mine, deliver_to=world.bob, deliver_channel="telegram")
    mine.refresh_from_db()
    assert mine.deliver_to == world.alice


def test_a_deactivated_member_is_refused_as_a_beats_owner_and_nothing_is_made(world):
    """A beat made for (owned by) a deactivated account would run in the name of someone
    who has left: refused as delivery to them is."""
    world.bob.is_active = False
    world.bob.save(update_fields=["is_active"])
    with pytest.raises(HeartbeatInvalid, match="bob is deactivated") as refused:
        beat(world.qor_a, name="bobs", owner=world.bob, deliver_to=world.alice, deliver_channel="web")
    assert refused.value.field == "owner"
    assert not Heartbeat.objects.filter(name="bobs").exists() and not PeriodicTask.objects.filter(
        name__contains="bobs").exists()


def test_names_are_unique_per_qor_but_not_across_tenants(world):
    beat(world.qor_a, name="daily")
    beat(world.qor_b, name="daily")
    with pytest.raises(HeartbeatInvalid, match="'daily' is already the name of a workspace beat"):
        beat(world.qor_a, name="daily")


def test_a_users_beat_names_say_nothing_about_other_users_beats(world):
    """Bob may name a beat as Alice did: the refusal would tell him hers exists."""
    mine = beat(world.qor_a, name="pills", owner=world.alice, deliver_to=world.alice, deliver_channel="telegram")
    his = beat(world.qor_a, name="pills", owner=world.bob, deliver_to=world.bob, deliver_channel="telegram")
    assert (mine.name, his.name) == ("pills", "pills") and mine.pk != his.pk
    with pytest.raises(HeartbeatInvalid, match="already have a beat"):
        beat(world.qor_a, name="pills", owner=world.bob, deliver_to=world.bob, deliver_channel="telegram")


def test_managed_beats_change_only_through_the_sync(world):
    hb = heartbeat_create(tenant=world.tenant_a, qor=world.qor_a, name=CLEAR_IMAGES, cron="0 3 * * *", managed=True)
    for change in (
        lambda: heartbeat_update(heartbeat=hb, cron="0 4 * * *"),
        lambda: heartbeat_set_enabled(heartbeat=hb, enabled=False),
        lambda: heartbeat_delete(heartbeat=hb),
    ):
        with pytest.raises(HeartbeatReadOnly):
            change()
    heartbeat_update(heartbeat=hb, cron="0 4 * * *", allow_managed=True)
    assert PeriodicTask.objects.get(pk=hb.periodic_task_id).crontab.hour == "4"


def test_beats_following_the_tenants_timezone_move_with_it(world):
    follows = beat(world.qor_a, name="follows")
    own = beat(world.qor_a, name="own", timezone="Asia/Tokyo")
    world.tenant_a.timezone = "Europe/Paris"
    world.tenant_a.save()
    assert services.heartbeats_retime(tenant=world.tenant_a) == 1
    assert str(PeriodicTask.objects.get(pk=follows.periodic_task_id).crontab.timezone) == "Europe/Paris"
    assert str(PeriodicTask.objects.get(pk=own.periodic_task_id).crontab.timezone) == "Asia/Tokyo"


def test_periodic_tasks_left_by_a_deleted_qor_are_cleaned_up(world):
    gone = beat(world.qor_b, name="gone")
    kept = beat(world.qor_a, name="kept")
    task_id = gone.periodic_task_id
    world.qor_b.delete()  # the beat goes with its Qor; its PeriodicTask stays behind
    assert PeriodicTask.objects.filter(pk=task_id).exists()
    assert services.periodic_task_orphans_delete() == 1
    assert list(PeriodicTask.objects.values_list("pk", flat=True)) == [kept.periodic_task_id]
