"""Which failed heartbeat runs are tried again, and when; the sweeper's recovery of runs
lost with their worker."""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from heartbeats_app.models import Heartbeat, HeartbeatRun
from tenancy.models import Tenant


class RunFailed(Exception):
    """A run failed in a way worth retrying (the model was unavailable); it is recorded,
    with how many times it was tried (`attempts`). `after`: seconds to come back after,
    when not a failed try's delay (its capped route's slots could not be read)."""

    def __init__(self, run_id: int, message: str, attempts: int = 1, after: float | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.attempts = attempts
        self.after = after


# A failed run worth trying again (reason on the run): its model was unavailable, its
# capped route stayed busy ("busy"), or its worker stopped while it ran. Tried at most RUN_TRIES times, the retries RETRY_DELAY and
# four times that after the try before (qorven.agent.tasks.heartbeat_run); a retry lost
# with its process is queued again by the sweeper (heartbeat_runs_recover). A try that
# found every slot of a capped route taken is not counted near its tick (run.py). Each try
# goes on from the tool rounds the one before stored in the run's cron session (resume.py).
TRANSIENT = ("unavailable", "busy", "interrupted")
RUN_TRIES = 3


def retry_delay(attempts: int) -> float:
    """Seconds after a run's `attempts`-th try failed before the next one."""
    return settings.QORVEN_HEARTBEAT_RETRY_DELAY * 4 ** max(attempts - 1, 0)


SUSPENDED_ERROR = "the workspace was suspended before it could be tried again"
SUSPENDED_MID_RUN = "the workspace was suspended while it ran: the model was not asked again"


def run_suspended_end(*, tenant: Tenant, run_id: int) -> None:
    """A failed run's retry came while the host had the workspace suspended: the run ends
    failed for good (reason "suspended"), neither retried nor recovered by the sweeper
    after resume, when its tick is long past."""
    HeartbeatRun.objects.filter(tenant=tenant, pk=run_id, status=HeartbeatRun.Status.FAILED).update(
        reason="suspended", error=SUSPENDED_ERROR, error_detail="")


def heartbeat_runs_recover(*, restart: bool = False, limit: int = 100) -> list[tuple[int, int, str, bool, int]]:
    """For the sweeper: runs to queue again, as (tenant, beat, tick, manual, run id). A run
    left 'running' longer than any task may live (or, after `restart`, at all: nothing of
    the stopped process still runs) is ended failed, "interrupted"; a failed run worth
    another try (TRANSIENT, under RUN_TRIES) whose retry is due and was not taken (lost
    with the process that held it, or never queued) is returned."""
    now = timezone.now()
    stale = now if restart else now - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)
    for run in HeartbeatRun.objects.filter(status=HeartbeatRun.Status.RUNNING, started_at__lt=stale)[:limit]:
        ended = HeartbeatRun.objects.filter(pk=run.pk, status=HeartbeatRun.Status.RUNNING,
                                            started_at=run.started_at).update(
            status=HeartbeatRun.Status.FAILED, reason="interrupted", finished_at=now,
            error="the worker stopped while running it")
        if ended:
            Heartbeat.objects.filter(pk=run.heartbeat_id).update(
                last_status=HeartbeatRun.Status.FAILED, last_error="the worker stopped while running it",
                last_error_detail="", updated_at=now)
    due = []
    candidates = HeartbeatRun.objects.filter(status=HeartbeatRun.Status.FAILED, reason__in=TRANSIENT,
                                             attempts__lt=RUN_TRIES).order_by("finished_at")
    for run in candidates[:limit]:
        # A minute past the retry's own time: the broker's copy, if it is alive, goes first
        # (and if both come, one takes the run: run._claim).
        wait = 0 if restart or run.reason == "interrupted" else retry_delay(run.attempts) + 60
        if run.finished_at is None or run.finished_at <= now - timedelta(seconds=wait):
            due.append((run.tenant_id, run.heartbeat_id, run.tick.isoformat(), run.manual, run.pk))
    return due
