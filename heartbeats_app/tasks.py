"""Celery entry points of heartbeats. Celery beat's DatabaseScheduler sends `heartbeats_app.run`
for each due beat (see services._mirror); "run now" sends it with manual=True."""
from __future__ import annotations

import logging
from datetime import datetime

from celery import shared_task
from django.conf import settings

from .runs import RunFailed, run_heartbeat

logger = logging.getLogger(__name__)

# Retry policy: a run whose model was unavailable is retried twice, after
# QORVEN_HEARTBEAT_RETRY_DELAY and four times that (1 and 4 minutes by default; the provider
# already retried with backoff within the call). Other failures are bugs or bad
# configuration: recorded with their error, not retried.
MAX_RETRIES = 2


@shared_task(bind=True, name="heartbeats_app.run", acks_late=True, max_retries=MAX_RETRIES)
def heartbeat_run(
    self, tenant_id: int, heartbeat_id: int, tick: str | None = None, manual: bool = False, run_id: int | None = None
) -> str:
    """Run one beat for one tick. Safe to run twice: the second run of a tick does nothing."""
    try:
        run = run_heartbeat(
            tenant_id=tenant_id, heartbeat_id=heartbeat_id, tick=datetime.fromisoformat(tick) if tick else None,
            manual=manual, run_id=run_id,
        )
    except RunFailed as exc:
        if self.request.retries >= self.max_retries:
            return "failed"
        kwargs = {"tenant_id": tenant_id, "heartbeat_id": heartbeat_id, "tick": tick, "manual": manual,
                  "run_id": exc.run_id}
        delay = settings.QORVEN_HEARTBEAT_RETRY_DELAY * 4**self.request.retries
        raise self.retry(exc=exc, kwargs=kwargs, countdown=delay) from None
    return run.status if run is not None else "nothing to do"
