"""Celery beat for heartbeats: django-celery-beat's DatabaseScheduler, telling each run
which tick it is for, and an embedded variant that runs inside `qorven serve`.

The tick (the scheduled time the run is for) is what the per-run lock is keyed by: two
beat processes that both fire a beat at 08:00 send the same tick, and only one run
happens (see runs._claim).
"""
from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import DatabaseError, InterfaceError, close_old_connections, connection, transaction
from celery.schedules import crontab, schedstate
from celery.utils.time import maybe_make_aware
from django_celery_beat.schedulers import DatabaseScheduler, ModelEntry

from qorven.runtime.repeated_failure import RepeatedFailure
from qorven.runtime.scheduled_backups import BACKUP_TASK

from .cron import every_hour, near_clock_change, tick_next, tick_previous
from .services import RUN_TASK

logger = logging.getLogger(__name__)

SCHEDULER_PATH = "heartbeats_app.scheduler:HeartbeatScheduler"
EMBEDDED_MAX_INTERVAL = 5.0
# A beat whose database drops a connection waits this long and reads the table again.
DATABASE_RETRY_WAIT = 1.0
SETUP_ATTEMPTS = 30
# Every tick reads the schedule's changes: the database away is one line, not one a tick.
_database_away = RepeatedFailure(logger, "beat: the database failed; the beat goes on with the schedule it read "
                                         "last and reads it again once the database answers")
# The foreign keys of a PeriodicTask to its schedule (one of them is set).
SCHEDULE_FIELDS = ("interval", "crontab", "solar", "clocked")


def _entry_tick(entry: Any, now: datetime) -> str | None:
    schedule = entry.schedule
    zone = getattr(schedule, "tz", None) or ZoneInfo(settings.TIME_ZONE)
    try:
        tick = tick_previous(schedule, zone, now)
    except (AttributeError, TypeError):  # not a crontab: let the run work it out
        return None
    return tick.isoformat() if tick is not None else None


def _backup_ticks(entry: Any, now: datetime) -> dict[str, str]:
    schedule = entry.schedule
    zone = getattr(schedule, "tz", None) or ZoneInfo(settings.TIME_ZONE)
    try:
        tick, following = tick_previous(schedule, zone, now), tick_next(schedule, zone, now)
    except (AttributeError, TypeError):  # not a crontab (changed by hand in the admin)
        return {}
    return {name: moment.isoformat() for name, moment in (("tick", tick), ("next_tick", following))
            if moment is not None}


class HeartbeatEntry(ModelEntry):
    """A beat's entry, due when heartbeats_app.cron says: near a clock change, a beat for
    every hour is due at each of its minutes in real time, the repeated hour of a night
    that falls back included (Celery's wall-clock arithmetic leaves that hour silent and
    would next look at the entry after it). Otherwise Celery decides, as always."""

    def is_due(self) -> schedstate:
        due, wait = super().is_due()  # also what disables an expired or one-off task
        model, schedule = self.model, self.schedule
        if (not model.enabled or model.start_time or model.expires or model.one_off
                or not isinstance(schedule, crontab) or not every_hour(schedule)):
            return schedstate(due, wait)
        zone = getattr(schedule, "tz", None) or ZoneInfo(settings.TIME_ZONE)
        now = schedule.now()
        if not near_clock_change(zone, now):
            return schedstate(due, wait)
        # Celery's own verdict is no use here: once a run is in the repeated hour it takes
        # the next wall-clock time for the earlier of its two moments, long past, and finds
        # the beat due again and again.
        missed = tick_next(schedule, zone, maybe_make_aware(self.last_run_at))
        following = tick_next(schedule, zone, now)
        return schedstate(missed is not None and missed <= now,
                          max((following - now).total_seconds(), 1.0) if following is not None else wait)


    def save(self) -> None:
        # django-celery-beat writes the run it holds in memory over the row's last run as it
        # syncs; a beat whose schedule changed since may count from a later one there
        # (heartbeats_app.services._last_run_carried): the later stands.
        from django_celery_beat.models import PeriodicTask

        stored = PeriodicTask.objects.filter(pk=self.model.pk).values_list("last_run_at", flat=True).first()
        held = self.model.last_run_at
        if stored is not None and (held is None or maybe_make_aware(stored) > maybe_make_aware(held)):
            self.model.last_run_at = self.last_run_at = stored
        super().save()


class HeartbeatScheduler(DatabaseScheduler):
    """DatabaseScheduler that adds `tick` to heartbeat runs, and reports the beat running
    (heartbeats_app.liveness) for `qorven doctor`."""

    Entry = HeartbeatEntry

    def setup_schedule(self) -> None:
        from .liveness import BeatReport

        self.alive = BeatReport()
        for attempt in range(SETUP_ATTEMPTS):
            try:
                super().setup_schedule()
                return
            except (DatabaseError, InterfaceError) as exc:
                if attempt == SETUP_ATTEMPTS - 1:
                    raise
                logger.warning("beat: the database failed while loading the schedule (%s); trying again", exc)
                close_old_connections()
                # django-celery-beat reads the table once, on its first use of the schedule; a
                # failed first read left no schedule at all, so the next try reads it afresh.
                self._initial_read, self._schedule = True, None
                time.sleep(DATABASE_RETRY_WAIT)

    def enabled_models_qs(self) -> Any:
        # The tasks and their schedules in one query, so in one snapshot of the table. Read
        # with a second query (django-celery-beat prefetches them), a task whose schedule
        # another process replaced or deleted in between, and then deleted the old schedule
        # (heartbeats_app.services._drop_unused_crontab), came without one: the beat
        # starting, or reading a changed table, ended on AttributeError.
        return super().enabled_models_qs().prefetch_related(None).select_related(*SCHEDULE_FIELDS)

    def schedule_changed(self) -> bool:
        # django-celery-beat's, but for its log: it logged a database error with its
        # traceback at ERROR on every tick while the database was away.
        try:
            close_old_connections()
            try:
                transaction.commit()  # a transaction left open would not see others' changes
            except transaction.TransactionManagementError:
                pass  # none open
            last, ts = self._last_timestamp, self.Changes.last_change()
        except (DatabaseError, InterfaceError) as exc:
            _database_away.failed(type(exc).__name__)
            return False
        _database_away.succeeded()
        self._last_timestamp = ts
        return bool(ts and ts > (last or ts))

    def tick(self, *args: Any, **kwargs: Any) -> float:  # type: ignore[override]
        self.alive.report()
        try:
            return super().tick(*args, **kwargs)
        except (DatabaseError, InterfaceError) as exc:
            # A dropped connection (a restart, a failover, a killed backend) must not end
            # the beat: nothing was sent for this tick, and the next one reads the table again.
            _database_away.failed(type(exc).__name__)
            close_old_connections()
            return DATABASE_RETRY_WAIT

    def close(self) -> None:
        self.alive.withdraw()
        super().close()

    def apply_async(self, entry, producer=None, advance=True, **kwargs):  # type: ignore[override]
        if entry.task == RUN_TASK:
            from django.utils import timezone

            tick = _entry_tick(entry, timezone.now())
            if tick is not None:
                # A copy: the entry's own kwargs are reloaded from the row on the next tick anyway.
                entry.kwargs = {**entry.kwargs, "tick": tick}
        elif entry.task == BACKUP_TASK:
            # The backup run is skipped when it waited behind a dump that ended past the
            # next time: a dump outlasting its period must not leave runs queued to follow it.
            entry.kwargs = {**entry.kwargs, **_backup_ticks(entry, entry.schedule.now())}
        return super().apply_async(entry, producer=producer, advance=advance, **kwargs)

    def install_default_entries(self, data):  # type: ignore[override]
        # Celery would add 'celery.backend_cleanup' to the table; Qorven keeps no task
        # results, so there is nothing to clean and no row to add.
        pass


class EmbeddedBeat(threading.Thread):
    """Celery beat's scheduling loop on a daemon thread of the web server (embedded
    default): due heartbeats are published to the embedded broker, like any task."""

    def __init__(self, *, max_interval: float = EMBEDDED_MAX_INTERVAL) -> None:
        super().__init__(name="qorven-beat", daemon=True)
        self.max_interval = max_interval
        self._stop_event = threading.Event()
        self.scheduler: HeartbeatScheduler | None = None

    def run(self) -> None:
        from celery import current_app

        app = current_app._get_current_object()  # the project's Celery app (qorven.celery)
        try:
            close_old_connections()
            self.scheduler = HeartbeatScheduler(app=app, max_interval=self.max_interval)
            while not self._stop_event.is_set():
                try:
                    interval = self.scheduler.tick()
                    if self.scheduler.should_sync():
                        self.scheduler._do_sync()
                except Exception:  # the database went away, a bad row: keep the clock running
                    logger.exception("embedded beat: tick failed")
                    close_old_connections()
                    interval = self.max_interval
                if interval:
                    self._stop_event.wait(min(interval, self.max_interval))
        except Exception:
            logger.exception("embedded beat stopped")
        finally:
            if self.scheduler is not None:
                try:
                    self.scheduler.close()
                except Exception:
                    logger.exception("embedded beat: final sync failed")
            connection.close()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop_event.set()
        self.join(timeout)
        logger.info("heartbeats: embedded beat scheduler stopped")


def embedded_beat_start() -> EmbeddedBeat:
    beat = EmbeddedBeat()
    beat.start()
    logger.info("heartbeats: embedded beat scheduler started")
    return beat
