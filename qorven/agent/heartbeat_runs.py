"""One run of a heartbeat: claim the tick, decide whether the model is needed, run the
heartbeat sub-agent in a cron session of its own, record the outcome, deliver the result.

Cost control, cheapest first: a paused beat or a tick already claimed does nothing; a spent
tenant budget or a beat whose inputs have not changed since its last HEARTBEAT_OK is
recorded as skipped without a model call; an answer of HEARTBEAT_OK is recorded and not
delivered. The reserved clear-images beat never calls a model.

Due reminders reach the user once: a run that delivers its answer marks the reminders it
had in view as done; a run that delivers nothing (skipped, failed, HEARTBEAT_OK, no
delivery target) leaves them due for the next one.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

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
from qorven.llm import ModelError, ModelRoute, ProviderUnavailable, provider_for_role, route_for
from qorven.llm.metered import Tally
from sessions_app.channel_kinds import Channel
from sessions_app.errors import SessionClosed
from sessions_app.models import Message, Session
from sessions_app.selectors import MessageRow, canonical_session_find, messages_read
from sessions_app.services import message_append, session_archive, session_resolve
from tenancy.errors import NotFound
from tenancy.models import Tenant
from tenancy.selectors import budget_exhausted, membership_get

from .project import project_context_for

logger = logging.getLogger(__name__)

HEARTBEAT_OK = "HEARTBEAT_OK"
CONTRACT = """\
You are running as the scheduled heartbeat "{name}", not answering a message: nobody is
waiting for a reply. Do the task below. If there is nothing worth telling {audience} right
now, answer with exactly HEARTBEAT_OK and nothing else; that answer is recorded and not
sent. Otherwise answer with the message itself, ready to be sent as it is: short, no
preamble, no mention of being a heartbeat."""
RECENT_MESSAGES = 20
RECENT_MESSAGE_CHARS = 500
RUNS_KEPT = 200
BEAT_TOOLS = frozenset({"set_beat", "list_beats", "update_beat", "delete_beat"})
_NOOP = re.compile(rf"[\W_]*{HEARTBEAT_OK}[\W_]*")


class RunFailed(Exception):
    """A run failed in a way worth retrying (the model was unavailable); it is recorded,
    with how many times it was tried (`attempts`)."""

    def __init__(self, run_id: int, message: str, attempts: int = 1) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.attempts = attempts


# A failed run worth trying again (reason on the run): its model was unavailable, or its
# worker stopped while it ran. Tried at most RUN_TRIES times, the retries RETRY_DELAY and
# four times that after the try before (qorven.agent.tasks.heartbeat_run); a retry lost
# with its process is queued again by the sweeper (heartbeat_runs_recover).
TRANSIENT = ("unavailable", "interrupted")
RUN_TRIES = 3


def retry_delay(attempts: int) -> float:
    """Seconds after a run's `attempts`-th try failed before the next one."""
    return settings.QORVEN_HEARTBEAT_RETRY_DELAY * 4 ** max(attempts - 1, 0)


@dataclass
class _Outcome:
    status: str
    output: str = ""
    error: str = ""  # in our words: everyone who reads the run's record reads this
    detail: str = ""  # the failure's own text: the host's (the admin hides it from tenant admins)
    reason: str = ""
    session: Session | None = None
    delivered: Message | None = None
    inputs_hash: str | None = None  # None: leave the beat's hash as it is
    spent: Tally = field(default_factory=Tally)
    reminders_done: list[int] = field(default_factory=list)  # reminders the delivered answer had in view
    at: datetime | None = None  # when the run looked at its inputs


def run_heartbeat(
    *, tenant_id: int, heartbeat_id: int, tick: datetime | None = None, manual: bool = False,
    run_id: int | None = None,
) -> HeartbeatRun | None:
    """Run the beat once for `tick` (its scheduled time; computed from the cron expression
    when not given). Returns the run, or None when there was nothing to do: the beat is
    gone or paused, or another process already has this tick. Raises RunFailed when the
    model was unavailable (the failure is recorded first)."""
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None:
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
    except ProviderUnavailable as exc:  # transient: the task retries the run
        _finish(beat, run, started, _model_failed(beat, exc, spent, reason="unavailable"))
        raise RunFailed(run.pk, exc.detail, attempts=run.attempts) from exc
    except ModelError as exc:  # refused, misconfigured: retrying cannot help
        _finish(beat, run, started, _model_failed(beat, exc, spent))
        return _reload(run)
    except Exception as exc:
        logger.exception("heartbeat %s failed", beat.pk)
        _finish(beat, run, started, _Outcome(
            HeartbeatRun.Status.FAILED, error=f"the run stopped on an error of ours ({type(exc).__name__})",
            detail=f"{type(exc).__name__}: {exc}"[:2000], spent=spent,
        ))
        return _reload(run)
    _finish(beat, run, started, outcome)
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
        tick = tick_previous(cron_parse(beat.cron).schedule(), timezone_parse(heartbeat_timezone(beat)), now)
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


def _execute(beat: Heartbeat, run: HeartbeatRun, spent: Tally, *, manual: bool) -> _Outcome:
    if beat.name in RESERVED_NAMES:
        return _Outcome(HeartbeatRun.Status.OK, output=system_beat_run(beat))
    gone = _former_member(beat)
    if gone is not None:
        # Their chat and reminders are not handed to the model for someone no longer here.
        return _Outcome(HeartbeatRun.Status.SKIPPED, reason="left",
                        error=f"not run: {gone} is no longer a member of {beat.tenant.slug}")
    if budget_exhausted(tenant=beat.tenant):
        return _Outcome(HeartbeatRun.Status.SKIPPED, reason="budget", error="the tenant's monthly token budget is spent")
    route = route_for(beat.qor, "heartbeat")
    if route.offline:
        return _Outcome(HeartbeatRun.Status.SKIPPED, reason="offline", error="no model is configured for heartbeats")
    user = beat.deliver_to or beat.owner
    now = timezone.now()
    context = _context(beat, user, now)
    inputs_hash = hashlib.sha256(json.dumps(context.fingerprint, sort_keys=True, default=str).encode()).hexdigest()
    if not manual and beat.last_inputs_hash and beat.last_inputs_hash == inputs_hash:
        return _Outcome(
            HeartbeatRun.Status.SKIPPED, reason="unchanged",
            error="nothing changed since the last HEARTBEAT_OK, so the model was not asked",
        )

    session = session_resolve(
        tenant=beat.tenant, qor=beat.qor, channel=Channel.CRON, thread_id=f"heartbeat:{beat.pk}:run:{run.pk}",
        user=user,
    )
    HeartbeatRun.objects.filter(pk=run.pk).update(session=session)
    try:
        content = _converse(beat, run, session, user, route, context, spent)
    finally:
        session_archive(session_id=session.pk)
    if not content.strip() or _NOOP.fullmatch(content.strip()):
        return _Outcome(HeartbeatRun.Status.NOOP, output=content.strip(), session=session, inputs_hash=inputs_hash,
                        spent=spent)
    delivered, error = _deliver(beat, run, content)
    return _Outcome(HeartbeatRun.Status.OK, output=content, error=error, session=session, delivered=delivered,
                    inputs_hash="", spent=spent, reminders_done=context.reminder_ids if delivered else [], at=now)


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


@dataclass
class _Context:
    system: str
    fingerprint: dict[str, Any]
    reminder_ids: list[int] = field(default_factory=list)


def _context(beat: Heartbeat, user: User | None, now: datetime) -> _Context:
    """The system prompt of the run, and the fingerprint of its inputs (prompt, recent
    messages of the user's chat, due reminders) that decides whether it may be skipped."""
    from memory_app.reminders import reminders_due

    qor = beat.qor
    zone_name = heartbeat_timezone(beat)
    zone = timezone_parse(zone_name)
    local = now.astimezone(zone)
    audience = (user.get_full_name() or user.get_username()) if user is not None else "anyone"
    sections = [qor.system_prompt.strip()]
    project = project_context_for(qor)
    if project.strip():
        sections.append("## Project context\n" + project.strip())
    sections.append("## Heartbeat\n" + CONTRACT.format(name=beat.name, audience=audience))
    sections.append(f"It is now {local:%A %Y-%m-%d %H:%M} ({zone_name}).")

    recent: list[MessageRow] = []
    reminders = []
    if user is not None:
        chat = canonical_session_find(tenant=beat.tenant, qor=qor, user=user)
        if chat is not None:
            recent = [
                m for m in messages_read(session=chat, limit=RECENT_MESSAGES)
                if m.role in (Message.Role.USER, Message.Role.ASSISTANT) and not m.metadata.get("notice")
            ]
        reminders = reminders_due(tenant=beat.tenant, qor=qor, user=user, now=now)
    if reminders:
        sections.append(
            f"## Reminders that are due\n{audience} asked to be reminded of these and their time has come: "
            "remind them in your message.\n"
            + "\n".join(f"- {r.content} (due {(r.period_start or now).astimezone(zone):%a %Y-%m-%d %H:%M})" for r in reminders)
        )
    if recent:
        lines = [
            f"[{m.channel}] {(m.sender_name or 'user') if m.role == Message.Role.USER else 'you'}: "
            f"{m.content[:RECENT_MESSAGE_CHARS]}"
            for m in recent
        ]
        sections.append(f"## Recent conversation with {audience}\n" + "\n".join(lines))
    fingerprint = {
        "prompt": beat.prompt,
        "recent": [(m.session_id, m.seq) for m in recent],
        "reminders": [(r.pk, r.content) for r in reminders],
    }
    return _Context(system="\n\n".join(s for s in sections if s), fingerprint=fingerprint,
                    reminder_ids=[r.pk for r in reminders])


def _converse(
    beat: Heartbeat, run: HeartbeatRun, session: Session, user: User | None, route: ModelRoute,
    context: _Context, spent: Tally,
) -> str:
    """The heartbeat sub-agent: the beat's prompt on the heartbeat route, with the tools a
    paired user could use (except managing beats), until a final answer."""
    from qorven.llm.metered import Spend
    from tenancy.tool_registry import ToolContext, registry
    from tenancy.trust import Trust

    from .loop import tool_loop
    from .mcp import mcp_tools_offered

    qor, tag = beat.qor, {"heartbeat": beat.pk, "run": run.pk}
    provider = provider_for_role(qor, "heartbeat")
    offered = [t for t in registry.offered(tenant=beat.tenant, qor=qor, trust=Trust.PAIRED) if t.name not in BEAT_TOOLS]
    offered += mcp_tools_offered(tenant=beat.tenant, qor=qor, trust=Trust.PAIRED)  # servers open to paired surfaces
    ctx = ToolContext(tenant=beat.tenant, qor=qor, user=user, session_id=session.pk, channel=Channel.CRON,
                      trust=Trust.PAIRED)
    message_append(session=session, role=Message.Role.USER, content=beat.prompt, channel=Channel.CRON,
                   sender_name=f"heartbeat {beat.name}", metadata=tag)
    messages: list[dict[str, Any]] = [{"role": "system", "content": context.system},
                                      {"role": "user", "content": beat.prompt}]
    completion = tool_loop(
        provider=provider, messages=messages, spend=Spend(beat.tenant, qor, "heartbeat", tally=spent),
        offered=offered, ctx=ctx, session=session, channel=Channel.CRON, metadata=tag,
    )
    if completion is None:
        return ""  # still calling tools when the rounds ran out: nothing to deliver
    message_append(session=session, role=Message.Role.ASSISTANT, content=completion.content,
                   channel=Channel.CRON, sender_name=qor.name, metadata={**tag, "model": completion.model})
    return completion.content


# What a run's record says of a model failure to everyone who reads it, a tenant admin
# included: our words for its kind (qorven.llm's classification), never the provider's.
_MODEL_FAILED = {
    "unreachable": "the model did not answer",
    "rate_limited": "the model was rate limited",
    "refused": "the model refused the prompt",
    "misconfigured": "the model's settings need fixing by whoever runs this workspace",
    "quota": "the model provider's quota is used up",
    "too_long": "the prompt did not fit the model's context",
}


def _model_failed(beat: Heartbeat, exc: ModelError, spent: Tally, reason: str = "") -> _Outcome:
    """A run the model failed: our words for it, and the provider's for the host (the
    admin's detail, and the log)."""
    logger.warning("heartbeat %s: the model failed (%s): %s", beat.pk, exc.kind, exc.detail)
    return _Outcome(HeartbeatRun.Status.FAILED, error=_MODEL_FAILED.get(exc.kind, _MODEL_FAILED["unreachable"]),
                    detail=f"{exc.kind}: {exc.detail}"[:2000], spent=spent, reason=reason)


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
        # (and if both come, one takes the run: _claim).
        wait = 0 if restart or run.reason == "interrupted" else retry_delay(run.attempts) + 60
        if run.finished_at is None or run.finished_at <= now - timedelta(seconds=wait):
            due.append((run.tenant_id, run.heartbeat_id, run.tick.isoformat(), run.manual, run.pk))
    return due


def _deliver(beat: Heartbeat, run: HeartbeatRun, content: str) -> tuple[Message | None, str]:
    """Append the result to the target user's canonical chat, tagged with the target
    channel; channels_app sends it to the platform. Idempotent per run."""
    if beat.deliver_to is None or not beat.deliver_channel:
        return None, ""
    try:
        membership_get(tenant=beat.tenant, user=beat.deliver_to)
    except NotFound:
        return None, f"not delivered: {beat.deliver_to} is no longer a member of {beat.tenant.slug}"

    def append() -> Message:
        chat = session_resolve(tenant=beat.tenant, qor=beat.qor, channel=beat.deliver_channel, user=beat.deliver_to)
        return message_append(
            session=chat, role=Message.Role.ASSISTANT, content=content, channel=beat.deliver_channel,
            sender_name=beat.qor.name, external_scope=f"heartbeat:{beat.pk}", external_id=f"run:{run.pk}",
            metadata={"heartbeat": beat.pk, "heartbeat_name": beat.name, "run": run.pk},
        ).message

    try:
        return append(), ""
    except SessionClosed:
        # /clear or /compact archived the chat between reading it and appending to it: the
        # answer goes to the chat that took over, as a person's message does.
        return append(), ""


def _finish(beat: Heartbeat, run: HeartbeatRun, started: float, outcome: _Outcome) -> None:
    """Record the outcome on the run and on the beat, and mark the reminders a delivered
    answer brought up as done, in one transaction."""
    from memory_app.services import reminders_mark_done

    now = timezone.now()
    duration = int((time.monotonic() - started) * 1000)
    tokens = outcome.spent.tokens
    with transaction.atomic():
        HeartbeatRun.objects.filter(pk=run.pk).update(
            status=outcome.status, reason=outcome.reason, finished_at=now, duration_ms=duration,
            output=outcome.output, error=outcome.error, error_detail=outcome.detail, tokens=F("tokens") + tokens,
            delivered_message=outcome.delivered,
        )
        fields: dict[str, Any] = {
            "last_run_at": run.started_at, "last_status": outcome.status, "last_error": outcome.error,
            "last_error_detail": outcome.detail,
            "last_duration_ms": duration, "tokens_spent": F("tokens_spent") + tokens, "updated_at": now,
        }
        if outcome.status in (HeartbeatRun.Status.OK, HeartbeatRun.Status.NOOP):
            fields["last_output"] = outcome.output
        if outcome.inputs_hash is not None:
            fields["last_inputs_hash"] = outcome.inputs_hash
        Heartbeat.objects.filter(pk=beat.pk).update(**fields)
        if outcome.reminders_done:
            reminders_mark_done(tenant=beat.tenant, reminder_ids=outcome.reminders_done, at=outcome.at or now)
        _prune_runs(beat)


def _prune_runs(beat: Heartbeat) -> None:
    oldest_kept = (
        HeartbeatRun.objects.filter(heartbeat=beat).order_by("-tick").values_list("tick", flat=True)[RUNS_KEPT - 1:RUNS_KEPT]
    )
    cutoff = list(oldest_kept)
    if cutoff:
        HeartbeatRun.objects.filter(heartbeat=beat, tick__lt=cutoff[0]).delete()
