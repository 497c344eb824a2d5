"""Celery entry points of the machinery itself."""
from __future__ import annotations

from datetime import datetime

from celery import shared_task
from django.conf import settings

from .scheduled_backups import BACKUP_TASK, scheduled_backup_take

# A dump of a large database outlasts QORVEN_TASK_TIME_LIMIT, which is sized for turns.
BACKUP_TIME_LIMIT = 6 * 3600


# Retry policy: none. A failed backup is logged and recorded where `qorven doctor` shows it,
# and the schedule's next run is the next try.
# Acknowledged as a worker takes it, unlike every other task: Redis hands a task not yet
# acknowledged to another worker each time the visibility timeout (twice
# QORVEN_TASK_TIME_LIMIT, 30 min by default) passes, and a dump may run for hours, each
# copy taking a worker's slot for nothing. Stretching that timeout to the longest dump
# would leave every other task a dead worker held (a heartbeat's run, a send) waiting as
# long; a backup lost with its worker costs nothing that waiting would save: the next
# scheduled run takes one, removes the half-written copy and records the lost run as
# skipped, and doctor fails once the schedule has come round twice without one.
@shared_task(name=BACKUP_TASK, acks_late=False, time_limit=BACKUP_TIME_LIMIT, ignore_result=True)
def backup_scheduled(tick: str | None = None, next_tick: str | None = None) -> str:
    """Take a scheduled backup into QORVEN_BACKUP_DIR and keep the newest QORVEN_BACKUP_KEEP.
    Safe to run twice at once: the second finds the directory locked and writes nothing.
    The beat sends the schedule's time it is for and the next (ISO 8601): taken after a run
    that ended past the next, it writes nothing, so runs that waited behind a long one do
    not pile up."""
    outcome = scheduled_backup_take(database=settings.DATABASES["default"], directory=settings.QORVEN_BACKUP_DIR,
                                    keep=settings.QORVEN_BACKUP_KEEP,
                                    tick=datetime.fromisoformat(tick) if tick else None,
                                    next_tick=datetime.fromisoformat(next_tick) if next_tick else None)
    return outcome.summary()
