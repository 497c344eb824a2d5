"""How long heartbeat leftovers are kept: images (the reserved clear-images beat) and the
runs of a beat with their cron sessions (pruned after each run of that beat).

Durations are settings in seconds or with a unit: 3600, 30m, 12h, 7d, 2w; 0 is "none"
(qorven.runtime.durations).
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from qorven.runtime.durations import duration_setting
from sessions_app.retention import cron_sessions_delete

from .models import Heartbeat, HeartbeatRun


def image_retention() -> timedelta | None:
    """QORVEN_IMAGE_RETENTION: images younger than this survive the clear-images beat;
    None: every image goes."""
    return duration_setting("QORVEN_IMAGE_RETENTION")


def runs_prune(*, beat: Heartbeat, now: datetime) -> tuple[int, int]:
    """Delete the beat's runs that finished longer than QORVEN_HEARTBEAT_RUN_RETENTION
    ago, with the cron sessions they ran in (their answers delivered to a chat stay
    there). Nothing goes when the retention is 0. Returns (runs, sessions) deleted."""
    retention = duration_setting("QORVEN_HEARTBEAT_RUN_RETENTION")
    if retention is None:
        return 0, 0
    old = HeartbeatRun.objects.filter(tenant=beat.tenant, heartbeat=beat, finished_at__lt=now - retention)
    with transaction.atomic():
        session_ids = [pk for pk in old.values_list("session_id", flat=True) if pk is not None]
        runs = old.delete()[1].get(HeartbeatRun._meta.label, 0)
        sessions = cron_sessions_delete(tenant=beat.tenant, session_ids=session_ids)
    return runs, sessions
