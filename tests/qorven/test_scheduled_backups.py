"""Scheduled backups: the beat's host-wide task follows QORVEN_BACKUP_SCHEDULE; each run
writes a backup that restores, keeps the newest QORVEN_BACKUP_KEEP of its own files and
nothing else is touched; one run at a time; a failure removes nothing and is shown by
`qorven doctor`, which also says how old the newest is."""
from __future__ import annotations

import io
import json
import logging
import os
import stat
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from celery import current_app
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from channels_app.doctor import doctor_checks
from heartbeats_app.models import Heartbeat
from heartbeats_app.scheduler import HeartbeatScheduler
from heartbeats_app.services import BACKUP_BEAT, backup_beat_sync, periodic_task_orphans_delete
from qorven.runtime.scheduled_backups import (
    BACKUP_TASK,
    backup_dir_lock,
    last_run,
    last_skip,
    scheduled_backup_take,
    scheduled_backups,
)
from qorven.runtime.startup import Startup, startup_run
from sessions_app.models import Message

from ..denied_dirs import denied
from ..processes import ROOT, wait_for
from .backup_copies import chat, restored

pytestmark = pytest.mark.django_db(transaction=True)

SUFFIX = "sqlite3" if connection.vendor == "sqlite" else "dump"


@pytest.fixture
def backups(settings, tmp_path):
    """Backups every night at 03:30, into a directory that does not exist yet, 3 kept."""
    settings.QORVEN_BACKUP_SCHEDULE = "30 3 * * *"
    settings.QORVEN_BACKUP_DIR = tmp_path / "backups"
    settings.QORVEN_BACKUP_KEEP = 3
    return settings.QORVEN_BACKUP_DIR


def ours(directory, when: datetime, text: str = "an older backup") -> str:
    """A file named as a scheduled backup taken at `when` (UTC)."""
    directory.mkdir(mode=0o700, exist_ok=True)
    name = f"qorven-scheduled-{when:%Y%m%d-%H%M%S}.{SUFFIX}"
    (directory / name).write_text(text)
    return name


def run_as_the_beat_does(drain) -> None:
    """Send the task the beat's row names, by name, to the worker, and wait for it."""
    current_app.send_task(PeriodicTask.objects.get(name=BACKUP_BEAT).task)
    drain()


def names(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))


def schedule_check() -> dict:
    checks = [c.as_dict() for c in doctor_checks(areas=frozenset({"backup"})) if c.subject == "schedule"]
    (check,) = checks
    return check


# --- the beat's task --------------------------------------------------------------------


def test_the_backup_beat_is_created_changed_and_removed_with_the_setting_at_startup(world, settings, tmp_path):
    settings.QORVEN_BACKUP_DIR = tmp_path / "backups"
    settings.TIME_ZONE = "Europe/Paris"
    out = io.StringIO()

    def serve_starts(**options) -> None:
        startup_run(Startup("serve", out, io.StringIO(), True, options), after_worker=False)

    # This hour in Paris: django-celery-beat reads only the crontab tasks due within two
    # hours of now (the others at its next full read, every five minutes).
    hour = str(timezone.now().astimezone(ZoneInfo("Europe/Paris")).hour)
    settings.QORVEN_BACKUP_SCHEDULE = f"30 {hour} * * *"
    serve_starts()
    task = PeriodicTask.objects.get(name=BACKUP_BEAT)
    assert (task.task, task.kwargs, task.enabled) == (BACKUP_TASK, "{}", True)
    crontab = task.crontab
    assert (crontab.minute, crontab.hour, crontab.day_of_week, str(crontab.timezone)) == ("30", hour, "*", "Europe/Paris")
    assert f"backups: '30 {hour} * * *' (Europe/Paris)" in out.getvalue()
    assert (tmp_path / "backups").is_dir() and stat.S_IMODE((tmp_path / "backups").stat().st_mode) == 0o700
    # Host-wide: no tenant's beat, untouched by the sweep of heartbeat tasks, and on the beat.
    assert not Heartbeat.objects.filter(periodic_task=task).exists()
    periodic_task_orphans_delete()
    schedule = HeartbeatScheduler(app=current_app._get_current_object(), lazy=True).all_as_schedule()
    assert schedule[BACKUP_BEAT].task == BACKUP_TASK

    settings.QORVEN_BACKUP_SCHEDULE = "0 */6 * * 1-5"
    serve_starts()
    changed = PeriodicTask.objects.get(name=BACKUP_BEAT)
    assert changed.pk == task.pk
    assert (changed.crontab.minute, changed.crontab.hour, changed.crontab.day_of_week) == ("0", "*/6", "1-5")
    assert not CrontabSchedule.objects.filter(pk=crontab.pk).exists()  # the old schedule went with it

    serve_starts(no_beat=True)  # a server that runs no beat leaves the beat's schedule alone
    settings.QORVEN_BACKUP_SCHEDULE = ""
    serve_starts(no_beat=True)
    assert PeriodicTask.objects.filter(name=BACKUP_BEAT).exists()
    serve_starts()
    assert not PeriodicTask.objects.filter(name=BACKUP_BEAT).exists()
    assert not CrontabSchedule.objects.filter(pk=changed.crontab_id).exists()
    assert "no longer scheduled" in out.getvalue()
    assert backup_beat_sync() == ""  # and stays gone


def backup_entry():
    """The backup beat's entry as the beat's scheduler reads it from the table."""
    return HeartbeatScheduler(app=current_app._get_current_object(), lazy=True).all_as_schedule()[BACKUP_BEAT]


def test_a_changed_schedule_waits_for_its_next_time_and_a_missed_run_is_still_caught_up(world, backups, settings):
    # Times within two hours of now: django-celery-beat reads only the crontab tasks due
    # within two hours (the others at its next full read).
    now = timezone.now().astimezone(ZoneInfo(settings.TIME_ZONE))
    ran = now - timedelta(minutes=90)
    settings.QORVEN_BACKUP_SCHEDULE = f"{ran.minute} {ran.hour} * * *"
    backup_beat_sync()
    # The beat was down at today's time, yesterday's ran: a restart with the same schedule
    # catches the missed one up at once.
    PeriodicTask.objects.filter(name=BACKUP_BEAT).update(last_run_at=ran - timedelta(days=1), total_run_count=1)
    assert backup_beat_sync() == ""
    assert backup_entry().is_due().is_due

    # Today's ran; then the schedule moves to a time that has passed since: nothing is
    # due until the new time comes round.
    PeriodicTask.objects.filter(name=BACKUP_BEAT).update(last_run_at=ran)
    moved = now - timedelta(minutes=30)
    settings.QORVEN_BACKUP_SCHEDULE = f"{moved.minute} {moved.hour} * * *"
    assert backup_beat_sync() == "updated"
    due, wait = backup_entry().is_due()
    assert not due and timedelta(seconds=wait) > timedelta(hours=23)


def test_no_task_the_broker_would_hand_out_again_while_it_runs_outlasts_the_visibility_timeout(settings):
    # Redis gives a task not yet acknowledged to another worker once the visibility timeout
    # has passed, and again every time it passes: a task acknowledged only when it ends
    # must end before it. A dump outlasts it, so a backup run is acknowledged as a worker
    # takes it (a run lost with its worker is the next run's to cover).
    visibility = current_app.conf.broker_transport_options["visibility_timeout"]
    assert visibility == 2 * settings.CELERY_TASK_TIME_LIMIT  # as the README's QORVEN_TASK_TIME_LIMIT says
    assert current_app.tasks[BACKUP_TASK].acks_late is False
    late = {name: task.time_limit or current_app.conf.task_time_limit for name, task in current_app.tasks.items()
            if not name.startswith("celery.") and task.acks_late}
    assert late and all(limit < visibility for limit in late.values()), late


def test_a_directory_backups_cannot_be_written_to_stops_the_start_with_a_clear_error(settings, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    settings.QORVEN_BACKUP_DIR = blocker / "backups"
    settings.QORVEN_BACKUP_SCHEDULE = "30 3 * * *"
    for process, embedded in (("worker", False), ("serve", True)):
        with pytest.raises(ImproperlyConfigured, match="QORVEN_BACKUP_DIR: .*a-file/backups cannot be made"):
            startup_run(Startup(process, io.StringIO(), io.StringIO(), embedded, {}), after_worker=False)


def test_a_directory_backups_can_be_written_to_but_not_read_stops_the_start_with_a_clear_error(world, backups):
    # Rotation lists it, and so do `qorven backup --list` and doctor, as the same user.
    backups.mkdir(mode=0o700)
    with denied(backups, mode=0o300):  # -wx: files can be made in it, but it cannot be listed
        for process, embedded in (("worker", False), ("serve", True)):
            with pytest.raises(ImproperlyConfigured) as refused:
                startup_run(Startup(process, io.StringIO(), io.StringIO(), embedded, {}), after_worker=False)
            said = str(refused.value)
            assert said.startswith(f"QORVEN_BACKUP_DIR: {backups} cannot be read: Permission denied")
            assert "the user the worker runs as must be able to read and write it" in said
            assert f"chmod u+rwx {backups}" in said
        outcome = scheduled_backup_take(database=connection.settings_dict, directory=backups, keep=3)
    assert f"{backups} cannot be read" in outcome.error and scheduled_backups(backups) == []


# --- a run ----------------------------------------------------------------------------


def test_a_scheduled_run_writes_a_backup_that_restores_every_tenants_rows(world, backups, drain):
    chat(world, world.alice, n=3)
    chat(world, world.charlie, tenant=world.tenant_b, qor=world.qor_b, n=2)
    backup_beat_sync()
    run_as_the_beat_does(drain)

    (made,) = scheduled_backups(backups)
    assert made.path.name.startswith("qorven-scheduled-") and made.path.suffix == f".{SUFFIX}"
    assert timezone.now() - made.taken_at < timedelta(minutes=5)
    assert stat.S_IMODE(made.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(backups.stat().st_mode) == 0o700
    assert names(backups) == [made.path.name]  # no partial, nothing else
    with restored(made.path) as cursor:
        cursor.execute("SELECT content FROM sessions_app_message ORDER BY content")
        assert [row[0] for row in cursor.fetchall()] == sorted(Message.objects.values_list("content", flat=True))
        cursor.execute("SELECT slug FROM qorven_tenant ORDER BY slug")
        assert [row[0] for row in cursor.fetchall()] == ["acme", "globex"]
    assert last_run(backups).ok and last_run(backups).file == made.path.name


def test_rotation_keeps_exactly_the_newest_of_its_own_and_leaves_every_other_file(world, backups, drain):
    chat(world, world.alice, n=1)
    old = [ours(backups, datetime(2026, 1, day, 3, 30, tzinfo=UTC)) for day in range(1, 6)]
    others = {
        "qorven-backup-20250101-000000.sqlite3": "taken by hand",
        "qorven-before-restore-20250101-000000.dump": "kept by a restore",
        "notes.txt": "the host's",
        "qorven-scheduled-20200101-000000.sqlite3.bak": "renamed by the host",
        "qorven-scheduled-latest.sqlite3": "not a time",
        f"qorven-scheduled-20261399-000000.{SUFFIX}": "not a date",
    }
    for name, text in others.items():
        (backups / name).write_text(text)
    (backups / f"qorven-scheduled-20200101-000000.{SUFFIX}.d").mkdir()
    backup_beat_sync()
    run_as_the_beat_does(drain)

    kept = [b.path.name for b in scheduled_backups(backups)]
    assert len(kept) == 3 and kept[1:] == [old[4], old[3]]
    assert kept[0] not in old  # the one just made
    for name, text in others.items():
        assert (backups / name).read_text() == text
    assert (backups / f"qorven-scheduled-20200101-000000.{SUFFIX}.d").is_dir()

    from django.conf import settings as django_settings

    scheduled_backup_take(database=django_settings.DATABASES["default"], directory=backups, keep=3,
                          now=timezone.now() + timedelta(days=1))  # the next night: still three, the oldest gone
    again = [b.path.name for b in scheduled_backups(backups)]
    assert len(again) == 3 and again[1:] == kept[:2]


def test_the_backup_just_made_is_kept_though_another_claims_a_later_time(world, backups, drain, settings):
    settings.QORVEN_BACKUP_KEEP = 1
    future = ours(backups, datetime(2099, 1, 1, tzinfo=UTC), "a clock set forward")
    backup_beat_sync()
    run_as_the_beat_does(drain)
    (made,) = scheduled_backups(backups)
    assert made.path.name != future and made.path.stat().st_size > len("a clock set forward")


def test_keep_zero_keeps_them_all(world, backups, drain, settings):
    settings.QORVEN_BACKUP_KEEP = 0
    old = [ours(backups, datetime(2026, 1, day, tzinfo=UTC)) for day in range(1, 5)]
    backup_beat_sync()
    run_as_the_beat_does(drain)
    assert len(scheduled_backups(backups)) == 5 and set(old) <= set(names(backups))


def test_a_run_while_another_is_writing_writes_nothing(world, backups, drain, caplog):
    backups.mkdir()
    backup_beat_sync()
    with (backup_dir_lock(backups, began=timezone.now()) as held,
          caplog.at_level(logging.WARNING, logger="qorven.runtime")):
        assert held
        run_as_the_beat_does(drain)
        with backup_dir_lock(backups, began=timezone.now()) as second:
            assert not second  # one holder at a time, within a process too
    assert scheduled_backups(backups) == [] and last_run(backups) is None
    assert "scheduled backup skipped" in caplog.text and "was still being written" in caplog.text
    run_as_the_beat_does(drain)  # let go: the next run writes
    assert len(scheduled_backups(backups)) == 1


def as_doctor_writes(moment: datetime) -> str:
    from django.conf import settings as django_settings

    return moment.astimezone(ZoneInfo(django_settings.TIME_ZONE)).strftime("%Y-%m-%d %H:%M %Z")


def test_a_run_skipped_while_another_was_writing_is_recorded_and_shown_but_is_no_failure(world, backups, drain):
    from django.conf import settings as django_settings

    backup_beat_sync()
    backups.mkdir()
    began = timezone.now().replace(microsecond=0) - timedelta(minutes=5)  # a long run, begun five minutes ago
    with backup_dir_lock(backups, began=began):
        run_as_the_beat_does(drain)  # the beat's next run, meanwhile
        while_writing = schedule_check()
        out = io.StringIO()
        call_command("backup", "--list", stdout=out)
    assert scheduled_backups(backups) == []
    skip = last_skip(backups)
    assert skip is not None and skip.since == began and timezone.now() - skip.at < timedelta(minutes=1)
    said = f"was skipped: another backup, begun at {as_doctor_writes(began)}, was still being written"
    assert while_writing["ok"] and "none yet" in while_writing["detail"] and said in while_writing["detail"]
    assert (f"was skipped: another backup, begun at {began.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC, was still being "
            "written.") in out.getvalue()

    # The long run finishes, and it worked: the skip is still the latest news, not a failure.
    done = scheduled_backup_take(database=django_settings.DATABASES["default"], directory=backups, keep=3, now=began)
    assert done.taken is not None
    check = schedule_check()
    assert check["ok"] and "5 minutes old" in check["detail"] and said in check["detail"]
    run_as_the_beat_does(drain)  # a run begun since: the skip is old news
    check = schedule_check()
    assert check["ok"] and "was skipped" not in check["detail"]
    out = io.StringIO()
    call_command("backup", "--list", stdout=out)
    assert "was skipped" not in out.getvalue()


def test_runs_that_waited_behind_a_long_one_are_dropped_not_taken_in_turn(world, backups, settings, drain):
    from django.conf import settings as django_settings

    settings.QORVEN_BACKUP_SCHEDULE = "* * * * *"  # every minute: a backup of a large database takes longer
    backup_beat_sync()
    scheduler = HeartbeatScheduler(app=current_app._get_current_object(), lazy=True)
    entry = scheduler.all_as_schedule()[BACKUP_BEAT]
    now = timezone.now()
    # A run for the minute three minutes ago began then and ends only now...
    long_one = (now - timedelta(minutes=3)).replace(second=0, microsecond=0)
    done = scheduled_backup_take(database=django_settings.DATABASES["default"], directory=backups, keep=3,
                                 now=long_one, tick=long_one, next_tick=long_one + timedelta(minutes=1))
    assert done.taken is not None
    # ...while the beat sent the next two, as it does, which reach a worker only now.
    for waited in (2, 1):
        entry.schedule.nowfun = lambda waited=waited: now - timedelta(minutes=waited)
        scheduler.apply_async(entry, advance=False)
        drain()
    assert scheduled_backups(backups) == [done.taken]
    skip = last_skip(backups)
    assert skip is not None and skip.due == (now - timedelta(minutes=1)).replace(second=0, microsecond=0)
    check = schedule_check()
    assert check["ok"] and (f"the run due at {as_doctor_writes(skip.due)} was skipped: no worker took it before "
                            f"{as_doctor_writes(skip.due + timedelta(minutes=1))}, the schedule's next time"
                            ) in check["detail"]

    if timezone.now().second >= 55:  # sent now and taken in the same minute, not in the next
        time.sleep(60 - timezone.now().second)
    sent = timezone.now()
    entry.schedule.nowfun = lambda: sent  # sent now: taken
    scheduler.apply_async(entry, advance=False)
    drain()
    assert len(scheduled_backups(backups)) == 2 and last_run(backups).ok

    # The same run again, as a second beat sends it:
    # while it is written, and once it is done, it is neither taken twice nor a skip.
    tick = sent.replace(second=0, microsecond=0)
    with backup_dir_lock(backups, began=sent, due=tick):
        scheduler.apply_async(entry, advance=False)
        drain()
    scheduler.apply_async(entry, advance=False)
    drain()
    assert len(scheduled_backups(backups)) == 2 and last_skip(backups) == skip
    assert "was skipped" not in schedule_check()["detail"]


@pytest.mark.parametrize("beat_behind", [timedelta(minutes=2), -timedelta(minutes=2)])
def test_a_beat_and_a_worker_whose_clocks_disagree_still_take_every_run(world, backups, settings, drain, beat_behind):
    settings.QORVEN_BACKUP_SCHEDULE = "* * * * *"
    backup_beat_sync()
    scheduler = HeartbeatScheduler(app=current_app._get_current_object(), lazy=True)
    entry = scheduler.all_as_schedule()[BACKUP_BEAT]
    now = timezone.now()
    # The beat's clock is two minutes behind the worker's (then ahead of it): it sends one
    # run a minute, each taken at once.
    for minute in range(2):
        entry.schedule.nowfun = lambda minute=minute: now - beat_behind + timedelta(minutes=minute)
        scheduler.apply_async(entry, advance=False)
        drain()
        time.sleep(1.1)  # a backup is named to the second
    assert len(scheduled_backups(backups)) == 2 and last_skip(backups) is None
    assert last_run(backups).ok


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a dump held up by another session's table lock")
def test_the_beats_next_run_while_a_long_dump_is_written_is_skipped_and_the_dump_ends_alone(world, backups, settings,
                                                                                            drain):
    import psycopg
    from django.conf import settings as django_settings

    settings.QORVEN_BACKUP_SCHEDULE = "* * * * *"  # every minute: longer than this dump takes
    backup_beat_sync()
    db = django_settings.DATABASES["default"]
    lock_file = backups / ".qorven-backup.lock"
    # Another session holds a table the dump must read: the run waits as one of a large
    # database does, holding the directory.
    with psycopg.connect(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"],
                         password=db["PASSWORD"] or None, dbname=db["NAME"]) as blocker:
        blocker.execute("LOCK TABLE sessions_app_message IN ACCESS EXCLUSIVE MODE")
        run_as_the_beat_does(lambda: None)  # the last period's run, under way
        assert wait_for(lambda: lock_file.exists() and lock_file.read_text() != "", 30)
        scheduler = HeartbeatScheduler(app=current_app._get_current_object(), lazy=True)
        scheduler.apply_async(scheduler.all_as_schedule()[BACKUP_BEAT], advance=False)  # this minute's
        assert wait_for(lambda: last_skip(backups) is not None, 30)
        assert scheduled_backups(backups) == [] and last_run(backups) is None
        check = schedule_check()
        assert check["ok"] and "was skipped: another backup, begun at" in check["detail"]
        blocker.rollback()  # the dump goes on
    drain()
    (made,) = scheduled_backups(backups)
    assert last_run(backups).ok and last_run(backups).file == made.path.name
    assert last_skip(backups).since == last_run(backups).at  # the run it gave way to
    check = schedule_check()
    assert check["ok"] and "was skipped: another backup, begun at" in check["detail"]


def a_run_killed_while_writing(directory, due: datetime) -> None:
    """A worker running the backup for `due` killed outright while it writes (SIGKILL:
    its process runs nothing more), as acknowledged runs are never handed out again."""
    import subprocess
    import sys

    script = ("import sys, time\n"
              "from datetime import UTC, datetime\n"
              "from pathlib import Path\n"
              "from qorven.runtime.scheduled_backups import backup_dir_lock\n"
              "with backup_dir_lock(Path(sys.argv[1]), began=datetime.now(UTC), due=datetime.fromisoformat(sys.argv[2])):\n"
              "    print('writing', flush=True)\n"
              "    time.sleep(60)\n")
    worker = subprocess.Popen([sys.executable, "-c", script, str(directory), due.isoformat()], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline() == "writing\n"
    finally:
        worker.kill()
        worker.wait(10)


def test_a_run_lost_with_its_worker_is_recorded_as_skipped_by_the_next(world, backups, drain, caplog):
    backup_beat_sync()
    backups.mkdir()
    first = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=2)
    a_run_killed_while_writing(backups, first)
    a_run_killed_while_writing(backups, first + timedelta(minutes=1))  # the next dies too
    skip = last_skip(backups)
    assert skip is not None and skip.due == first and skip.since == skip.at
    said = f"the run due at {as_doctor_writes(first)}, begun at {as_doctor_writes(skip.since)}, did not finish"
    check = schedule_check()
    assert check["ok"] and said in check["detail"] and "its worker stopped while writing it" in check["detail"]
    out = io.StringIO()
    call_command("backup", "--list", stdout=out)
    assert "did not finish: its worker stopped while writing it" in out.getvalue()

    with caplog.at_level(logging.WARNING, logger="qorven.runtime"):
        run_as_the_beat_does(drain)  # the next run takes one, and says which it follows
    assert len(scheduled_backups(backups)) == 1 and last_run(backups).ok
    assert (f"the run due at {(first + timedelta(minutes=1)).astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
            in caplog.text and "did not finish" in caplog.text)
    assert "did not finish" not in schedule_check()["detail"]

    # The lock file as a version that did not empty it left it, naming the run just done:
    # that run ended, nothing was lost.
    skipped = last_skip(backups)
    done = last_run(backups)
    (backups / ".qorven-backup.lock").write_text(json.dumps({"began": done.at.isoformat(), "due": None}))
    time.sleep(1.1)  # a backup is named to the second
    run_as_the_beat_does(drain)
    assert len(scheduled_backups(backups)) == 2 and last_skip(backups) == skipped


def test_a_failed_backup_removes_nothing_and_doctor_shows_why(world, backups, drain, caplog):
    old = [ours(backups, datetime(2026, 1, day, 3, 30, tzinfo=UTC)) for day in range(1, 6)]
    missing = backups.parent / "gone.sqlite3"
    with caplog.at_level(logging.ERROR, logger="qorven.runtime"):
        outcome = scheduled_backup_take(database={"ENGINE": "django.db.backends.sqlite3", "NAME": str(missing)},
                                        directory=backups, keep=3)
    assert outcome.taken is None and "does not exist" in outcome.error
    assert names(backups) == sorted(old)  # nothing made, nothing removed
    assert "scheduled backup failed, nothing was removed" in caplog.text and str(missing) in caplog.text
    failed = last_run(backups)
    assert not failed.ok and "does not exist" in failed.error

    backup_beat_sync()
    check = schedule_check()
    assert not check["ok"] and "failed" in check["detail"] and "does not exist" in check["detail"]
    out = io.StringIO()
    call_command("backup", "--list", stdout=out)
    assert "failed:" in out.getvalue() and "does not exist" in out.getvalue()

    run_as_the_beat_does(drain)  # the next run works: the failure is over
    assert schedule_check()["ok"]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="pg_dump's own failures")
def test_a_dump_that_fails_is_logged_and_recorded_without_the_password(world, backups, monkeypatch, caplog):
    from django.conf import settings as django_settings

    database = {**django_settings.DATABASES["default"], "PORT": "1", "PASSWORD": "s3cret-pa55word"}
    with caplog.at_level(logging.INFO):
        outcome = scheduled_backup_take(database=database, directory=backups, keep=3)
    assert outcome.error and "pg_dump failed" in outcome.error
    assert "s3cret-pa55word" not in caplog.text and "s3cret-pa55word" not in (backups / ".qorven-backup-status.json").read_text()
    monkeypatch.setenv("PATH", str(backups))  # no pg_dump at all
    outcome = scheduled_backup_take(database=django_settings.DATABASES["default"], directory=backups, keep=3)
    assert "pg_dump was not found" in outcome.error and scheduled_backups(backups) == []


# --- what the host is told -------------------------------------------------------------------


def test_doctor_says_off_none_yet_and_the_newest_ones_age(world, settings, backups, drain):
    settings.QORVEN_BACKUP_SCHEDULE = ""
    check = schedule_check()
    assert check["ok"] and check["detail"].startswith("off")

    settings.QORVEN_BACKUP_SCHEDULE = "30 3 * * *"
    check = schedule_check()  # set, but no beat started with it yet
    assert not check["ok"] and "has no backups" in check["detail"] and "qorven beat" in check["fix"]

    backup_beat_sync()
    check = schedule_check()
    assert check["ok"] and "none yet" in check["detail"] and "03:30" in check["detail"]

    run_as_the_beat_does(drain)
    check = schedule_check()
    assert check["ok"] and "0 minutes old" in check["detail"] and "1 in" in check["detail"]

    settings.QORVEN_BACKUP_SCHEDULE = "0 4 * * *"  # changed, the beat not restarted
    check = schedule_check()
    assert not check["ok"] and "'30 3 * * *'" in check["detail"] and "'0 4 * * *'" in check["detail"]


def test_doctor_fails_when_the_newest_is_older_than_two_periods(world, backups, settings):
    backup_beat_sync()
    now = timezone.now()
    ours(backups, now - timedelta(hours=20))  # the schedule came round once since, at most: not late
    assert schedule_check()["ok"]
    for leftover in backups.iterdir():
        leftover.unlink()
    name = ours(backups, now - timedelta(days=3))
    check = schedule_check()
    assert not check["ok"] and name in check["detail"] and "3 days old" in check["detail"]

    settings.QORVEN_BACKUP_SCHEDULE = "*/10 * * * *"  # every ten minutes: 3 days is very late too
    backup_beat_sync()
    assert not schedule_check()["ok"]


def test_doctor_fails_when_the_beat_sent_runs_but_no_backup_appeared(world, backups):
    backup_beat_sync()
    PeriodicTask.objects.filter(name=BACKUP_BEAT).update(total_run_count=1,
                                                         last_run_at=timezone.now() - timedelta(hours=2))
    check = schedule_check()
    assert not check["ok"] and "none in" in check["detail"] and "worker" in check["fix"]


def test_backup_list_shows_the_scheduled_backups_newest_first_with_sizes_and_times(world, backups, drain):
    older = ours(backups, datetime(2026, 3, 1, 3, 30, tzinfo=UTC), "x" * 2048)
    (backups / "notes.txt").write_text("the host's")
    backup_beat_sync()
    run_as_the_beat_does(drain)
    (newest, _) = scheduled_backups(backups)
    out = io.StringIO()
    call_command("backup", "--list", stdout=out)
    said = out.getvalue()
    assert "'30 3 * * *'" in said and "the newest 3 kept" in said and f"2 in {backups}" in said
    assert said.index(newest.path.name) < said.index(older)
    assert "2026-03-01 03:30:00 UTC" in said and "2.0 KB" in said
    assert "notes.txt" not in said and "failed" not in said
    with pytest.raises(CommandError, match="--list takes no file"):
        call_command("backup", "--list", "somewhere.bak")


def test_a_directory_that_cannot_be_read_is_named_with_what_to_do_by_list_and_doctor(world, backups, drain):
    backup_beat_sync()
    run_as_the_beat_does(drain)
    assert len(scheduled_backups(backups)) == 1
    with denied(backups):
        with pytest.raises(CommandError) as listed:
            call_command("backup", "--list", stdout=io.StringIO())
        check = schedule_check()
    said = str(listed.value)
    assert said.startswith(f"QORVEN_BACKUP_DIR: {backups} cannot be read: Permission denied")
    assert "Run `qorven backup --list` as the user the worker runs as" in said
    assert not check["ok"] and check["detail"] == f"QORVEN_BACKUP_DIR: {backups} cannot be read: Permission denied"
    assert check["fix"].startswith("run `qorven doctor` as the user the worker runs as")


def test_a_directory_that_can_never_exist_is_named_by_list_and_doctor(world, backups, settings, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    settings.QORVEN_BACKUP_DIR = blocker / "backups"
    backup_beat_sync()
    with pytest.raises(CommandError, match=r"QORVEN_BACKUP_DIR: .*a-file/backups cannot be read: Not a directory"):
        call_command("backup", "--list", stdout=io.StringIO())
    check = schedule_check()
    assert not check["ok"] and "a-file/backups cannot be read: Not a directory" in check["detail"]


def test_backup_list_with_nothing_scheduled_says_so(settings, tmp_path):
    settings.QORVEN_BACKUP_SCHEDULE = ""
    settings.QORVEN_BACKUP_DIR = tmp_path / "never-made"
    out = io.StringIO()
    call_command("backup", "--list", stdout=out)
    assert "off" in out.getvalue() and f"None in {tmp_path / 'never-made'}" in out.getvalue()
    assert not (tmp_path / "never-made").exists()  # listing makes nothing
    assert os.listdir(tmp_path) == []
