"""The beat scheduler's own decisions, on a clock of the test's: when an entry is due and
which tick its run is for, across the nights a timezone changes its clocks."""
from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from celery import current_app
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from heartbeats_app.scheduler import HeartbeatScheduler, _entry_tick
from heartbeats_app.selectors import heartbeat_next_run
from heartbeats_app.services import heartbeat_set_enabled, heartbeat_update
from tenancy.services import membership_timezone_set

from ..factories.heartbeats_app import beat

UTC = ZoneInfo("UTC")
PARIS = ZoneInfo("Europe/Paris")

pytestmark = pytest.mark.django_db


def beat_night(world, cron: str, start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    """Run a Paris beat's scheduler entry from `start` to `end` as Celery beat does (the
    entry looked at again when its last answer said so): (when it fired, its run's tick)."""
    heartbeat = beat(world.qor_a, cron=cron, timezone="Europe/Paris")
    entry = HeartbeatScheduler.Entry(PeriodicTask.objects.get(pk=heartbeat.periodic_task_id),
                                     app=current_app._get_current_object())
    clock = {"now": start}
    entry.schedule.nowfun = lambda: clock["now"].astimezone(PARIS)
    entry.last_run_at = start - timedelta(seconds=1)
    fired, look_at = [], start
    while clock["now"] <= end:
        if clock["now"] >= look_at:
            due, wait = entry.is_due()
            if due:
                tick = _entry_tick(entry, clock["now"])
                assert tick is not None
                fired.append((clock["now"].astimezone(UTC), datetime.fromisoformat(tick).astimezone(UTC)))
                entry.last_run_at = clock["now"]
            look_at = clock["now"] + timedelta(seconds=max(wait, 1))
        clock["now"] += timedelta(seconds=20)
    return fired


# Paris falls back on 2026-10-25: 02:00-02:59 twice, 03:00 CEST becoming 02:00 CET at 01:00 UTC.
NIGHT_START = datetime(2026, 10, 24, 23, 30, tzinfo=UTC)  # 01:30 CEST
NIGHT_END = datetime(2026, 10, 25, 3, 0, tzinfo=UTC)  # 04:00 CET


@pytest.mark.parametrize("cron, every", [("*/15 * * * *", 15), ("0 * * * *", 60)])
def test_a_beat_for_every_hour_keeps_its_pace_through_the_repeated_hour(world, cron, every):
    fired = beat_night(world, cron, NIGHT_START, NIGHT_END)
    times = [at for at, _ in fired]
    gaps = {(b - a) // timedelta(minutes=1) for a, b in zip(times, times[1:])}
    assert gaps == {every}, times
    assert times[0] - NIGHT_START < timedelta(minutes=every) and times[-1] == NIGHT_END
    # Each run is for its own tick (the per-run lock is keyed by it): none taken for another.
    assert [tick for _, tick in fired] == [at.replace(second=0) for at in times]


def test_a_beat_at_a_named_hour_in_the_repeated_hour_runs_once(world):
    fired = beat_night(world, "30 2 * * *", NIGHT_START, NIGHT_END)
    assert [tick for _, tick in fired] == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC)]  # 02:30 CEST, not again at CET


# Paris springs forward on 2026-03-29: 02:00 CET becomes 03:00 CEST at 01:00 UTC.
SPRING_START = datetime(2026, 3, 28, 23, 30, tzinfo=UTC)  # 00:30 CET
SPRING_END = datetime(2026, 3, 29, 3, 0, tzinfo=UTC)  # 05:00 CEST


def test_a_beat_for_every_hour_keeps_its_pace_when_the_clocks_go_forward(world):
    times = [at for at, _ in beat_night(world, "*/15 * * * *", SPRING_START, SPRING_END)]
    assert {(b - a) // timedelta(minutes=1) for a, b in zip(times, times[1:])} == {15}
    assert times[0] == SPRING_START and times[-1] == SPRING_END


def test_a_beat_in_the_hour_the_clocks_skip_runs_once_after_it(world):
    fired = beat_night(world, "30 2 * * *", SPRING_START, SPRING_END)
    assert [tick for _, tick in fired] == [datetime(2026, 3, 29, 1, 30, tzinfo=UTC)]  # 03:30 CEST


def _entry_now(heartbeat) -> HeartbeatScheduler.Entry:
    """The beat's entry as the beat's scheduler reads it from the table, on the real clock."""
    return HeartbeatScheduler.Entry(PeriodicTask.objects.get(pk=heartbeat.periodic_task_id),
                                    app=current_app._get_current_object())


def test_a_beat_moved_to_a_time_already_past_today_first_runs_at_it_tomorrow(world):
    # It ran at its time 90 minutes ago; the person moves it to 30 minutes ago. Celery beat
    # counts from the last run, so the new time (after it) would be due at once.
    now = timezone.now().astimezone(PARIS)
    ran, moved = now - timedelta(minutes=90), now - timedelta(minutes=30)
    heartbeat = beat(world.qor_a, cron=f"{ran.minute} {ran.hour} * * *", timezone="Europe/Paris")
    PeriodicTask.objects.filter(pk=heartbeat.periodic_task_id).update(last_run_at=ran)
    assert not _entry_now(heartbeat).is_due().is_due

    heartbeat_update(heartbeat=heartbeat, cron=f"{moved.minute} {moved.hour} * * *")
    due, wait = _entry_now(heartbeat).is_due()
    assert not due and timedelta(seconds=wait) > timedelta(hours=23)


def test_a_beat_whose_owner_moves_zone_is_not_run_twice_in_their_day(world):
    # Alice's beat at her time ran 90 minutes ago in Paris; she moves to London, where that
    # time came 30 minutes ago: this morning's run is done, the next is tomorrow's.
    membership_timezone_set(tenant=world.tenant_a, user=world.alice, timezone="Europe/Paris")
    ran = timezone.now().astimezone(PARIS) - timedelta(minutes=90)
    heartbeat = beat(world.qor_a, cron=f"{ran.minute} {ran.hour} * * *", owner=world.alice, timezone="")
    PeriodicTask.objects.filter(pk=heartbeat.periodic_task_id).update(last_run_at=ran)
    membership_timezone_set(tenant=world.tenant_a, user=world.alice, timezone="Europe/London")
    assert str(PeriodicTask.objects.get(pk=heartbeat.periodic_task_id).crontab.timezone) == "Europe/London"
    due, wait = _entry_now(heartbeat).is_due()
    assert not due and timedelta(seconds=wait) > timedelta(hours=23)


def test_a_paused_beat_resumed_after_its_time_first_runs_at_its_next_time(world):
    now = timezone.now().astimezone(PARIS)
    ran = now - timedelta(minutes=30)
    heartbeat = beat(world.qor_a, cron=f"{ran.minute} {ran.hour} * * *", timezone="Europe/Paris")
    PeriodicTask.objects.filter(pk=heartbeat.periodic_task_id).update(last_run_at=ran - timedelta(days=3))
    heartbeat = heartbeat_set_enabled(heartbeat=heartbeat, enabled=False)
    heartbeat = heartbeat_set_enabled(heartbeat=heartbeat, enabled=True)  # three days' runs missed while paused
    due, wait = _entry_now(heartbeat).is_due()
    assert not due and timedelta(seconds=wait) > timedelta(hours=23)


BERLIN, NEW_YORK = ZoneInfo("Europe/Berlin"), ZoneInfo("America/New_York")


def _wall(moment: datetime, zone: ZoneInfo) -> datetime:
    """The same wall-clock date and time in `zone` (what a daily beat means by its time)."""
    return moment.astimezone(BERLIN).replace(tzinfo=None).replace(tzinfo=zone)


def test_a_beat_whose_owner_moves_west_after_todays_run_is_not_run_again_that_day(world):
    # Alice's beat at her time (and three hours later) ran 90 minutes ago in Berlin; she
    # moves to New York, where that time and date come again in hours: that slot is done,
    # the later one is not.
    membership_timezone_set(tenant=world.tenant_a, user=world.alice, timezone="Europe/Berlin")
    now = timezone.now()
    ran = now.astimezone(BERLIN).replace(second=0, microsecond=0) - timedelta(minutes=90)
    later = ran + timedelta(hours=3)
    heartbeat = beat(world.qor_a, cron=f"{ran.minute} {ran.hour},{later.hour} * * *", owner=world.alice, timezone="")
    PeriodicTask.objects.filter(pk=heartbeat.periodic_task_id).update(last_run_at=ran)
    ran_entry = _entry_now(heartbeat)  # the beat's scheduler holds this run in memory, not yet saved

    membership_timezone_set(tenant=world.tenant_a, user=world.alice, timezone="America/New_York")
    assert str(PeriodicTask.objects.get(pk=heartbeat.periodic_task_id).crontab.timezone) == "America/New_York"
    for saved_by_the_beat in (False, True):
        if saved_by_the_beat:
            ran_entry.save()  # django-celery-beat writes its last run back as it syncs
        due, wait = _entry_now(heartbeat).is_due()
        expected = _wall(later, NEW_YORK) - timezone.now()
        assert not due and abs(timedelta(seconds=wait) - expected) < timedelta(minutes=1), (
            timedelta(seconds=wait), expected)
    heartbeat.refresh_from_db()
    assert heartbeat_next_run(heartbeat) == _wall(later, NEW_YORK)  # as the admin and list_beats show it


def test_a_beat_whose_owner_moves_west_before_todays_run_runs_at_the_new_zones_time(world):
    membership_timezone_set(tenant=world.tenant_a, user=world.alice, timezone="Europe/Berlin")
    due_at = timezone.now().astimezone(BERLIN).replace(second=0, microsecond=0) + timedelta(minutes=30)
    heartbeat = beat(world.qor_a, cron=f"{due_at.minute} {due_at.hour} * * *", owner=world.alice, timezone="")
    PeriodicTask.objects.filter(pk=heartbeat.periodic_task_id).update(last_run_at=due_at - timedelta(days=1))

    membership_timezone_set(tenant=world.tenant_a, user=world.alice, timezone="America/New_York")
    due, wait = _entry_now(heartbeat).is_due()
    expected = _wall(due_at, NEW_YORK) - timezone.now()  # today's time, in New York: not run yet
    assert not due and abs(timedelta(seconds=wait) - expected) < timedelta(minutes=1), (
        timedelta(seconds=wait), expected)
