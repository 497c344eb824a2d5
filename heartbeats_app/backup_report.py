"""What `qorven doctor` says of the host's scheduled backups: off; or the newest one's age,
with a failure when the beat does not run the schedule that is set, the last run failed,
or the schedule has come round twice (and an hour more) since the newest; and a run
skipped since the last one began (another was still being written, no worker took it in
time, or its worker stopped while writing it), which is no failure of itself."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from django.conf import settings
from django_celery_beat.models import PeriodicTask

from qorven.runtime.scheduled_backups import UNREADABLE_FIX, BackupDirError, last_run, last_skip, scheduled_backups

from .cron import cron_parse, tick_next
from .services import BACKUP_BEAT

# Past its second missed tick a backup may still be being written (a large dump): late is
# only this much after it.
LATE_AFTER = timedelta(hours=1)


@dataclass(frozen=True)
class BackupReport:
    ok: bool
    detail: str
    fix: str = ""


def backup_schedule_report(*, now: datetime) -> BackupReport:
    expression = settings.QORVEN_BACKUP_SCHEDULE
    directory = settings.QORVEN_BACKUP_DIR
    if not expression:
        return BackupReport(True, "off: QORVEN_BACKUP_SCHEDULE is empty, so no backup is taken unless you run "
                                  "`qorven backup` (set it, e.g. '30 3 * * *', to take one every night)")
    restart = ("restart `qorven serve` (embedded default) or `qorven beat` (scale-out) with this setting: it is "
               "synced into the beat's schedule as they start")
    cron = cron_parse(expression)
    zone = ZoneInfo(settings.TIME_ZONE)
    task = PeriodicTask.objects.select_related("crontab").filter(name=BACKUP_BEAT).first()
    if task is None or not task.enabled or task.crontab is None:
        return BackupReport(False, f"QORVEN_BACKUP_SCHEDULE is '{expression}', but the beat's schedule has no "
                                   "backups", restart)
    runs = {field: str(getattr(task.crontab, field)) for field in cron.fields()}
    if runs != cron.fields() or str(task.crontab.timezone) != settings.TIME_ZONE:
        written = " ".join(runs.values())
        return BackupReport(False, f"the beat takes backups at '{written}' ({task.crontab.timezone}), not at "
                                   f"QORVEN_BACKUP_SCHEDULE's '{expression}' ({settings.TIME_ZONE})", restart)
    schedule = cron.schedule()
    try:
        backups = scheduled_backups(directory)
    except BackupDirError as exc:
        return BackupReport(False, f"QORVEN_BACKUP_DIR: {exc}", f"run `qorven doctor` {UNREADABLE_FIX}")
    newest = backups[0] if backups else None
    last = last_run(directory)
    skip = last_skip(directory)
    skipped = f"; {skip.describe(_when)}" if skip is not None and (last is None or skip.at > last.at) else ""
    if last is not None and not last.ok and (newest is None or last.at > newest.taken_at):
        before = f"; the newest is {newest.path.name}, {_age(now - newest.taken_at)} old" if newest else ""
        return BackupReport(False, f"the last scheduled backup, at {_when(last.at)}, failed: {last.error}{before}",
                            "fix what it says (the log says it too); the next run is at "
                            f"{_when(tick_next(schedule, zone, now))}")
    if newest is None:
        sent = task.last_run_at if task.total_run_count else None
        if sent is not None and now - sent > LATE_AFTER:
            return BackupReport(False, f"the beat sent a backup run at {_when(sent)}, but there is none in {directory} "
                                       "on this machine",
                                "check that a worker runs (on the embedded default, `qorven serve`) and that "
                                "QORVEN_BACKUP_DIR names this directory where it runs")
        return BackupReport(True, f"none yet in {directory}; the first is due at {_when(tick_next(schedule, zone, now))}"
                                  f"{skipped}")
    first = tick_next(schedule, zone, newest.taken_at)
    second = tick_next(schedule, zone, first) if first is not None else None
    age = _age(now - newest.taken_at)
    if second is not None and now > second + LATE_AFTER:
        return BackupReport(False, f"the newest, {newest.path.name}, is {age} old: the schedule '{expression}' has "
                                   f"come round at least twice since without one{skipped}",
                            "check that the beat and a worker run (the checks above) and the log (\"scheduled "
                            "backup\")")
    kept = f"the newest {settings.QORVEN_BACKUP_KEEP} kept" if settings.QORVEN_BACKUP_KEEP else "all kept"
    return BackupReport(True, f"the newest, {newest.path.name}, is {age} old; {len(backups)} in {directory} ({kept}); "
                              f"the next is due at {_when(tick_next(schedule, zone, now))}{skipped}")


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "no time within 29 years"
    return moment.astimezone(ZoneInfo(settings.TIME_ZONE)).strftime("%Y-%m-%d %H:%M %Z")


def _age(age: timedelta) -> str:
    minutes = max(int(age.total_seconds() // 60), 0)
    if minutes < 60:
        return f"{minutes} minute{'s' * (minutes != 1)}"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} hour{'s' * (hours != 1)}"
    return f"{hours // 24} days"
