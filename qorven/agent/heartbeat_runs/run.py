"""The run itself: claim the beat's tick, decide whether the model is needed, run the
sub-agent in a cron session of its own, then record and deliver what came of it."""
from __future__ import annotations

import hashlib
import json
import logging
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from heartbeats_app.cron import CronError, cron_parse, tick_previous, timezone_parse
from heartbeats_app.errors import HeartbeatNotFound
from heartbeats_app.models import RESERVED_NAMES, Heartbeat, HeartbeatRun
from heartbeats_app.retention import runs_prune
from heartbeats_app.selectors import heartbeat_get, heartbeat_timezone
from heartbeats_app.system_beats import system_beat_run
from qorven.llm import ModelError, ProviderUnavailable, SlotsBusy, WaitingForSlot, route_for
from qorven.llm.metered import Tally
from sessions_app.channel_kinds import Channel
from sessions_app.errors import WorkspaceSuspended
from sessions_app.services.lifecycle import session_archive
from sessions_app.services.resolve import session_resolve
from tenancy.access import tenant_serving
from tenancy.errors import NotFound
from tenancy.models import Tenant
from tenancy.selectors import budget_exhausted, membership_get

from ..turn_endings import cut_short
from .outcome import Outcome, model_failed, result_deliver, run_finish
from .resume import earlier_try, go_on
from .retries import SUSPENDED_MID_RUN, RunFailed, run_suspended_end
from .subagent import NOOP, converse, run_context

logger = logging.getLogger(__name__)

CUT_BEFORE_ANSWER = ("the model's output limit ran out before it wrote an answer (spent thinking, or in a tool "
                     "call): raise the heartbeat model's output limit or shorten the beat's task")
# Our words for an answer cut partway, by qorven.agent.turn_endings.cut_short's reason.
CUT_PARTWAY = {
    "cut_off": ("cut off: the model's output limit ran out partway through its answer{delivered}: raise the "
                "heartbeat model's output limit or shorten the beat's task"),
    "withheld": "withheld: the model provider's content filter stopped its answer partway{delivered}",
}
DELIVERED_CUT = " (delivered as far as it went, with a notice saying so)"
ROUNDS_RAN_OUT = ("the model still called tools after {rounds} round(s) of them and never answered: narrow the "
                  "beat's task (whoever runs this workspace can raise QORVEN_MAX_TOOL_ROUNDS)")


def run_heartbeat(
    *, tenant_id: int, heartbeat_id: int, tick: datetime | None = None, manual: bool = False,
    run_id: int | None = None,
) -> HeartbeatRun | None:
    """Run the beat once for `tick` (its scheduled time; computed from the cron expression
    when not given). Returns the run, or None when there was nothing to do: the beat is
    gone or paused, its workspace is suspended, or another process already has this tick. Raises RunFailed when the
    model was unavailable (the failure is recorded first). A retry of a failed run (`run_id`)
    goes on from the tool rounds its earlier try stored (resume.py): no tool runs twice. A
    run whose worker died after the model answered (after delivering that answer, or before)
    is finished from the answer stored: no second model call, no second delivery.

    A beat of a workspace the host suspended does not run: its ticks meanwhile are not
    made up after resume, and a retry of a failed run (`run_id`) that comes meanwhile ends
    that run for good, so its tick is not run hours late once the workspace is resumed."""
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None or not tenant_serving(tenant):  # suspended by the host: its beats wait, unrun
        if tenant is not None and run_id is not None:
            run_suspended_end(tenant=tenant, run_id=run_id)
        return None
    try:
        beat = heartbeat_get(tenant=tenant, heartbeat_id=heartbeat_id)
    except HeartbeatNotFound:
        return None
    if not beat.enabled and not manual:
        return None
    now = timezone.now()
    if manual:
        tick = tick or now
    elif tick is None:
        tick = _scheduled_tick(beat, now)
    run = _claim(beat, tick, manual=manual, run_id=run_id)
    if run is None:
        logger.info("heartbeat %s tick %s is already being run elsewhere", beat.pk, tick.isoformat())
        return None
    started = time.monotonic()
    spent = Tally()
    try:
        outcome = _execute(beat, run, spent, manual=manual)
    except (ProviderUnavailable, WaitingForSlot) as exc:  # transient: the task retries the run
        run_finish(beat, run, started, model_failed(beat, exc, spent, reason="unavailable"))
        attempts, after = run.attempts, None
        if isinstance(exc, (SlotsBusy, WaitingForSlot)) and timezone.now() - run.tick <= timedelta(
                seconds=settings.QORVEN_MODEL_DEADLINE):
            # A capped route busy with other calls of ours is not the model failing: no
            # try is used up, as a turn's wait for a slot uses none, for as long as a turn
            # would wait. The run still waited on its thread at most THREAD_WAIT each time.
            # Slots that could not be read (Redis away) were not waited for at all: the
            # run comes back for them as soon as a turn would, not after a failed try's delay.
            HeartbeatRun.objects.filter(pk=run.pk, attempts__gt=0).update(attempts=F("attempts") - 1)
            attempts -= 1
            if isinstance(exc, WaitingForSlot):
                after = exc.retry_after
        raise RunFailed(run.pk, exc.detail, attempts=attempts, after=after) from exc
    except ModelError as exc:  # refused, misconfigured: retrying cannot help
        run_finish(beat, run, started, model_failed(beat, exc, spent))
        return _reload(run)
    except WorkspaceSuspended:  # while the model thought: nothing more is asked, run or delivered
        run_finish(beat, run, started, Outcome(HeartbeatRun.Status.FAILED, reason="suspended",
                                                error=SUSPENDED_MID_RUN, spent=spent))
        return _reload(run)
    except Exception as exc:
        logger.exception("heartbeat %s failed", beat.pk)
        run_finish(beat, run, started, Outcome(
            HeartbeatRun.Status.FAILED, error=f"the run stopped on an error of ours ({type(exc).__name__})",
            detail=f"{type(exc).__name__}: {exc}"[:2000], spent=spent,
        ))
        return _reload(run)
    run_finish(beat, run, started, outcome)
    _prune(beat)
    return _reload(run)


def _prune(beat: Heartbeat) -> None:
    """Old runs of this beat and their cron sessions go (QORVEN_HEARTBEAT_RUN_RETENTION);
    a failure here is logged, never the run's."""
    try:
        runs, sessions = runs_prune(beat=beat, now=timezone.now())
    except Exception:
        logger.exception("could not prune old runs of heartbeat %s", beat.pk)
        return
    if runs:
        logger.info("heartbeat %s: pruned %s old run(s) and %s cron session(s)", beat.pk, runs, sessions)


def _reload(run: HeartbeatRun) -> HeartbeatRun:
    run.refresh_from_db()
    return run


def _scheduled_tick(beat: Heartbeat, now: datetime) -> datetime:
    try:
        tick = tick_previous(cron_parse(beat.cron, stored=True).schedule(), timezone_parse(heartbeat_timezone(beat)), now)
    except CronError:
        tick = None
    return tick or now.replace(second=0, microsecond=0)


def _claim(beat: Heartbeat, tick: datetime, *, manual: bool, run_id: int | None) -> HeartbeatRun | None:
    """Take the (beat, tick) lock: insert the run row. A retry re-takes its own failed run;
    a run left 'running' longer than any task may live (its worker died) can be taken over."""
    now = timezone.now()
    if run_id is not None:
        taken = HeartbeatRun.objects.filter(pk=run_id, heartbeat=beat, status=HeartbeatRun.Status.FAILED).update(
            status=HeartbeatRun.Status.RUNNING, attempts=F("attempts") + 1, started_at=now, error=""
        )
        return HeartbeatRun.objects.get(pk=run_id) if taken else None
    try:
        with transaction.atomic():
            return HeartbeatRun.objects.create(tenant=beat.tenant, heartbeat=beat, tick=tick, manual=manual)
    except IntegrityError:
        stale = now - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)
        taken = HeartbeatRun.objects.filter(
            heartbeat=beat, tick=tick, status=HeartbeatRun.Status.RUNNING, started_at__lt=stale
        ).update(attempts=F("attempts") + 1, started_at=now)
        return HeartbeatRun.objects.get(heartbeat=beat, tick=tick) if taken else None


def _execute(beat: Heartbeat, run: HeartbeatRun, spent: Tally, *, manual: bool) -> Outcome:
    if beat.name in RESERVED_NAMES:
        return Outcome(HeartbeatRun.Status.OK, output=system_beat_run(beat))
    gone = _former_member(beat)
    if gone is not None:
        # Their chat and reminders are not handed to the model for someone no longer here.
        return Outcome(HeartbeatRun.Status.SKIPPED, reason="left",
                       error=f"not run: {gone} is no longer a member of {beat.tenant.slug}")
    if budget_exhausted(tenant=beat.tenant):
        return Outcome(HeartbeatRun.Status.SKIPPED, reason="budget", error="the tenant's monthly token budget is spent")
    route = route_for(beat.qor, "heartbeat")
    if route.offline:
        return Outcome(HeartbeatRun.Status.SKIPPED, reason="offline", error="no model is configured for heartbeats")
    user = beat.deliver_to or beat.owner
    now = timezone.now()
    earlier = earlier_try(beat, run, user)  # None on a first try
    context = run_context(beat, user, now)
    if earlier is not None:  # the prompt the run was asked, not one edited since (resume.py)
        context.fingerprint["prompt"] = earlier.prompt
    inputs_hash = hashlib.sha256(json.dumps(context.fingerprint, sort_keys=True, default=str).encode()).hexdigest()
    if not manual and beat.last_inputs_hash and beat.last_inputs_hash == inputs_hash:
        return Outcome(
            HeartbeatRun.Status.SKIPPED, reason="unchanged",
            error="nothing changed since the last HEARTBEAT_OK, so the model was not asked",
        )

    if earlier is not None and not go_on(beat, earlier):
        earlier = None
    if earlier is not None:
        session = earlier.session
    else:
        session = session_resolve(
            tenant=beat.tenant, qor=beat.qor, channel=Channel.CRON, thread_id=f"heartbeat:{beat.pk}:run:{run.pk}",
            user=user,
        )
        HeartbeatRun.objects.filter(pk=run.pk).update(session=session)
    try:
        completion = converse(beat, run, session, user, route, context, spent, earlier)
    finally:
        session_archive(session_id=session.pk)
    if completion is None:
        # Not "nothing to say" either: the model never answered, and asking again would
        # most likely go round the same tools. Recorded for the admin, nothing delivered.
        logger.warning("heartbeat %s: the model still called tools when its rounds ran out", beat.pk)
        return Outcome(HeartbeatRun.Status.FAILED, reason="tool_rounds", session=session, spent=spent,
                       error=ROUNDS_RAN_OUT.format(rounds=settings.QORVEN_MAX_TOOL_ROUNDS))
    content = completion.content
    if completion.cut_off and not content.strip():
        # Not "nothing to say": the model never got to say anything. Asking again within
        # the same limit would be cut the same way, so it is not retried.
        logger.warning("heartbeat %s: the model's output limit ended the run before any answer", beat.pk)
        return Outcome(HeartbeatRun.Status.FAILED, reason="cut_off", error=CUT_BEFORE_ANSWER, session=session,
                       spent=spent)
    if not content.strip() or NOOP.fullmatch(content.strip()):
        return Outcome(HeartbeatRun.Status.NOOP, output=content.strip(), session=session, inputs_hash=inputs_hash,
                       spent=spent)
    cut = cut_short(completion)
    # A try finishing from the answer its earlier try stored may find it delivered already.
    delivered, error = result_deliver(beat, run, content, cut=cut,
                                      again=earlier is not None and earlier.answer is not None)
    if cut:
        # Delivered, but not whole: the run says so (reason and error) wherever it is read.
        logger.warning("heartbeat %s: its answer was cut partway (%s)", beat.pk, cut)
        error = "; ".join(e for e in (CUT_PARTWAY[cut].format(delivered=DELIVERED_CUT if delivered else ""), error)
                          if e)
    return Outcome(HeartbeatRun.Status.OK, output=content, error=error, session=session, delivered=delivered,
                   reason=cut, inputs_hash="", spent=spent, reminders_done=context.reminder_ids if delivered else [],
                   at=now)


def _former_member(beat: Heartbeat) -> User | None:
    """The beat's owner or delivery target if they left the tenant (or were deactivated)."""
    for person in (beat.owner, beat.deliver_to):
        if person is None:
            continue
        if not person.is_active:
            return person
        try:
            membership_get(tenant=beat.tenant, user=person)
        except NotFound:
            return person
    return None
