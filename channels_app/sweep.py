"""The sweeper: finds work a dead worker left behind and queues it again.

A worker killed outright (its whole process group, so prefork cannot requeue anything)
leaves its tasks unacknowledged in the broker, which redelivers them only after the
visibility timeout (half an hour), and the embedded broker loses them with the process.
Everything a task does is recorded in the database first, so recovery reads it from
there instead, every QORVEN_SWEEP_INTERVAL seconds (a reserved entry of Celery beat's
schedule, `__qorven_sweep__`) and whenever a worker starts — with no grace period when
`qorven serve` starts on the embedded default, whose previous run took its queue with it:

- sessions with a message still waiting for its answer and nobody holding the session
  (its lease ran out: QORVEN_TURN_LEASE) get their turn queued — at once when a turn
  held it and died, otherwise once the message is older than the grace period;
- inbound events still pending, or claimed by a task that died, are processed;
- voice notes still waiting for their transcript long after the transcription task's own
  retries would have ended are transcribed again (once per that period; while their
  workspace is suspended, that task ends them unanswered instead);
- replies and notices for a platform stored still marked as awaiting the planning of
  their delivery (Message.delivery_unplanned: the process that stored one died before
  planning it, which runs once the reply commits) are planned, and so sent, once; what
  was stored without telling delivery (imported or seeded history) is never marked, nor
  anything stored before the mark existed;
- deliveries left pending are sent, the oldest of each binding (its send wakes the next);
  a part whose sender died mid-send is failed (it may have reached the platform, and a
  reply is never sent twice) and shown as such, at the first sweep that finds its bot's
  send gate free (channels_app.send_gate: on PostgreSQL the gate went with the dead
  sender's connection), and the rest of its reply is sent;
- a /compact left pending with nobody holding its session is compacted (or, after a few
  tries, reported failed in the chat: memory_app.compact_requests), once its workspace is
  not suspended.

Queuing twice is harmless: every task is safe to run twice.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db.models import Min, Q
from django.utils import timezone

from qorven.runtime.cache_away import cache_or, cache_unreachable
from qorven.runtime.database import DATABASE_DOWN
from qorven.runtime.durations import duration_setting
from qorven.runtime.repeated_failure import RepeatedFailure
from sessions_app.models import Message, Session

from .models import InboundEvent, OutboundDelivery, PairingRequest
from .receive import CLAIM_STALE_AFTER
from .send_gate import binding_free, binding_taken

logger = logging.getLogger(__name__)

# Work younger than this is still in the hands of the task queued for it.
GRACE = timedelta(seconds=30)
# A pending part untouched this long has no retry coming (backoffs stop at a minute).
DELIVERY_GRACE = timedelta(minutes=3)
# A pending part waiting this long while nothing holds its bot was not woken: the send
# that held the bot died (its gate expired), and would have sent it next.
UNWOKEN_GRACE = timedelta(seconds=10)
BATCH = 500


@dataclass
class SweepReport:
    turns: int = 0
    inbound: int = 0
    deliveries: int = 0
    interrupted_sends: int = 0
    unplanned: int = 0  # replies stored whose delivery was never planned, planned now
    voice_notes: int = 0
    heartbeat_runs: int = 0
    compactions: int = 0
    events_pruned: int = 0  # finished inbound events past their retention, deleted
    deliveries_pruned: int = 0  # sent reply parts past their retention, deleted
    pairings_pruned: int = 0  # pairing codes that ran out a while ago, deleted

    def __bool__(self) -> bool:
        return bool(self.turns or self.inbound or self.deliveries or self.interrupted_sends or self.voice_notes
                    or self.heartbeat_runs or self.compactions or self.unplanned)


# The sweep's marks (a voice note swept once per period, the prunes looked for once an
# hour) only spare it work: with the cache away (Redis down) the work is done as if no
# mark were set. A bot's send gate kept in the cache (QORVEN_SEND_GATES=cache) that
# cannot be read counts as held: its send would wait for Redis anyway, and a later pass
# looks again. The log says so once while it lasts.
_cache_away = RepeatedFailure(logger, "the sweep cannot use the cache; it does the work its marks spare "
                                      "and leaves replies whose bot's send gate it cannot read to a later pass")


def _due(key: str, seconds: float) -> bool:
    """Whether the work `key` marks is due: the mark set now for `seconds`, or the cache away."""
    return cache_or(True, lambda: cache.add(key, 1, seconds), away=_cache_away)


def _bot_sending(binding_id: int) -> bool:
    """Whether a send holds the binding's bot; a gate in the cache that cannot be read
    (Redis away) counts as held, so the pass goes on to what is after the deliveries.
    Not `cache_or`: the gate may be the database's (QORVEN_SEND_GATES=database), whose
    errors are not the cache away and whose answer says nothing of the cache being back."""
    try:
        return not binding_free(binding_id=binding_id)
    except Exception as exc:
        if not cache_unreachable(exc):
            raise
        _cache_away.failed(type(exc).__name__)
        return True


PRUNE_EVERY = 3600  # seconds: what is past its retention is looked for once an hour (by any process)
PRUNE_BATCH = 1000
PRUNE_BATCHES = 20  # per sweep at most: a long backlog is worked off hour by hour


def inbound_events_prune(*, now) -> int:
    """Delete finished inbound events (done, failed) older than QORVEN_INBOUND_RETENTION,
    at most once an hour: past it no platform delivers a message again, so nothing needs
    recognising. Returns how many went."""
    keep = _retention("QORVEN_INBOUND_RETENTION", "inbound events")
    if keep is None or not _due("qorven:inbound-pruned", PRUNE_EVERY):
        return 0
    # Every tenant's: the retention is the host's, and a finished event is nobody's work.
    return _prune(InboundEvent.objects.filter(
        created_at__lt=now - keep, state__in=[InboundEvent.State.DONE, InboundEvent.State.FAILED]
    ).order_by("created_at"))


def deliveries_prune(*, now) -> int:
    """Delete the parts of replies sent to a platform longer than QORVEN_DELIVERY_RETENTION
    ago, at most once an hour. Each held a copy of its text for good, beside the message:
    past the retention no retry, sweep or platform report of it can come. Failed parts
    stay (the chat shows their replies as not delivered). Returns how many went."""
    keep = _retention("QORVEN_DELIVERY_RETENTION", "sent reply parts")
    if keep is None or not _due("qorven:deliveries-pruned", PRUNE_EVERY):
        return 0
    return _prune(OutboundDelivery.objects.filter(
        state=OutboundDelivery.State.SENT, sent_at__lt=now - keep
    ).order_by("sent_at"))


# How long a pairing code that ran out (or was locked by wrong guesses) is kept after it
# expired: the owner may still look up why a sender was not paired. Decided codes stay.
PAIRING_KEPT = timedelta(days=7)


def pairings_prune(*, now) -> int:
    """Delete pairing codes that ran out more than PAIRING_KEPT ago, at most once an hour:
    an unknown sender who kept writing left one a code for good. Approved and denied ones
    stay, the record of who decided. Returns how many went."""
    if not _due("qorven:pairings-pruned", PRUNE_EVERY):
        return 0
    return _prune(PairingRequest.objects.filter(
        expires_at__lt=now - PAIRING_KEPT,
        state__in=[PairingRequest.State.PENDING, PairingRequest.State.EXPIRED, PairingRequest.State.LOCKED],
    ).order_by("expires_at"))


def _retention(name: str, what: str) -> timedelta | None:
    try:
        return duration_setting(name)
    except ValueError as exc:
        logger.warning("%s are kept: %s", what, exc)
        return None


def _prune(rows) -> int:
    """Delete `rows` (ordered, on an index) in batches; a long backlog is worked off hour by hour."""
    deleted = 0
    for _ in range(PRUNE_BATCHES):
        batch = list(rows.values_list("pk", flat=True)[:PRUNE_BATCH])
        if not batch:
            break
        deleted += rows.model.objects.filter(pk__in=batch).delete()[0]
    return deleted


def voice_lost_after() -> timedelta:
    """How long a voice note may wait for its transcript before its task counts as lost:
    the transcription task's whole retry schedule, and a minute more."""
    from qorven.agent.tasks import voice_backoff

    return timedelta(seconds=sum(voice_backoff(i) for i in range(settings.QORVEN_VOICE_RETRIES + 1)) + 60)


def _interrupted_sends_recover() -> int:
    """Fail the parts whose sender died mid-send, and send the rest of their replies.

    A part is claimed (`sending`) only under its binding's gate, and a dead sender's gate
    is free again at once on PostgreSQL (its connection closed) or once its key expires
    elsewhere: a binding whose gate the sweeper can take has no send under way, so its
    `sending` parts are nobody's. They are failed the sweep after their sender died —
    they waited until they were twice QORVEN_PLATFORM_TIMEOUT and 30 s old before — and
    the rest of each reply is sent once the gate is let go (and the person told of the
    part that may be missing: channels_app.send_failures)."""
    from .send_failures import deliveries_interrupted_fail, reply_undelivered_tell
    from .tasks import deliver_message_task

    bindings = (OutboundDelivery.objects.filter(state=OutboundDelivery.State.SENDING)
                .values_list("binding_id", flat=True).distinct().order_by("binding_id")[:BATCH])
    failed = 0
    for binding_id in list(bindings):
        replies: list[tuple[int, int]] = []
        try:
            with binding_taken(binding_id=binding_id) as free:
                if free:
                    replies = deliveries_interrupted_fail(binding_id=binding_id)
        except Exception as exc:  # a gate in the cache, Redis away: left to a later pass, as a held gate is
            if not cache_unreachable(exc):
                raise
            _cache_away.failed(type(exc).__name__)
        for tenant_id, message_id in replies:
            failed += 1
            if not reply_undelivered_tell(tenant_id=tenant_id, message_id=message_id):
                deliver_message_task.delay(tenant_id, message_id)  # its parts left, if any (the notice after them)
    return failed


def unplanned_replies(*, now, grace: timedelta):
    """The oldest replies and notices for a platform stored more than `grace` ago and still
    marked as awaiting the planning of their delivery, with their sessions: read on the
    partial index message_unplanned_idx, whose condition the filter restates as it is
    (`WHERE "delivery_unplanned"`, no parameter), so neither database scans the messages
    table (tests/channels_app/test_sweep.py)."""
    return (Message.objects.filter(delivery_unplanned=True, created_at__lte=now - grace)
            .select_related("session").order_by("created_at")[:BATCH])


def _unplanned_replies_plan(*, now, grace: timedelta) -> int:
    """Plan the delivery of replies whose process died before planning it (it runs after
    the reply commits; `grace` leaves a planning under way alone). Planning clears each
    one's mark whatever comes of it, so each is planned once; a part planned already is
    kept as it is, so nothing is sent twice."""
    from .delivery import deliveries_plan

    planned = 0
    for message in unplanned_replies(now=now, grace=grace):
        try:
            deliveries_plan(message=message)
        except DATABASE_DOWN:
            raise
        except Exception:
            logger.exception("could not plan delivery of message %s", message.pk)
        planned += 1
    return planned


def previous_run_let_go() -> tuple[int, int]:
    """What the previous run of the embedded default held when it stopped — the sessions'
    turn leases, the inbound events it had claimed — let go, before this run's own worker
    starts (nothing of this run holds anything yet): a server killed outright mid-turn
    leaves both, and they would keep the messages they stand for unanswered until they
    run out (QORVEN_TURN_LEASE, CLAIM_STALE_AFTER) instead of being taken up by the sweep
    this run starts with. Processing an event again stores nothing twice. (leases, claims)."""
    from sessions_app.turn_writes import turn_leases_end_all

    leases = turn_leases_end_all()
    # Every tenant's claims, by no tenant: the run that held them worked for every tenant of
    # the host, and nothing of this run holds an event yet. Each is read again by its
    # tenant and id when its task takes it (channels_app.receive.inbound_event).
    claims = InboundEvent.objects.filter(state=InboundEvent.State.PROCESSING).update(
        state=InboundEvent.State.PENDING, updated_at=timezone.now())
    if leases or claims:
        logger.info("the last run stopped holding %s session(s) and %s inbound event(s); let go", leases, claims)
    return leases, claims


def sweep(*, restart: bool = False) -> SweepReport:
    """Queue again what was left behind; report what was found. `restart`: the process
    that held the queued work in memory is gone (the embedded default's server starting
    again), so no recorded work is in any task's hands and none is given a grace period:
    what a stopped server accepted is processed as soon as it is back."""
    from qorven.agent.heartbeat_runs import heartbeat_runs_recover
    from memory_app.compact_requests import compact_requests_recover
    from memory_app.tasks import session_compact
    from qorven.agent.tasks import agent_turn, heartbeat_run, voice_transcribe_task

    from .tasks import deliver_message_task, inbound_process_task

    now = timezone.now()
    grace, delivery_grace = (timedelta(0), timedelta(0)) if restart else (GRACE, DELIVERY_GRACE)
    report = SweepReport()
    pending = Message.objects.filter(answer_state=Message.Answer.PENDING)  # the partial index's rows
    # Active sessions only, in the query: a batch taken first and narrowed after was filled
    # by archived chats still holding a question, and an active chat's never came up.
    # A session whose turn let its lease run out without letting go (its worker died) has
    # nobody answering it: its messages wait no grace, so a dead turn is taken over once
    # QORVEN_TURN_LEASE has passed, as the lease promises, not 30 s after the message came.
    # Their turns queued as their first waiting messages came: a capped model route's queue
    # that Redis lost is joined again in that order (each workspace's messages in the order
    # they came), not in the sessions' (newest first).
    waiting = (
        pending.filter(Q(created_at__lte=now - grace) | Q(session__turn_lease_until__lt=now),
                       session__state=Session.State.ACTIVE)
        .exclude(metadata__has_key="voice", metadata__voice="pending")
        .values("session_id").annotate(first=Min("pk")).order_by("first")
        .values_list("session_id", "first")[:BATCH]
    )
    in_order = [session_id for session_id, _ in waiting]
    free = dict(Session.objects.filter(pk__in=in_order, state=Session.State.ACTIVE).filter(
        Q(turn_lease_until__isnull=True) | Q(turn_lease_until__lt=now)
    ).values_list("pk", "tenant_id"))
    for session_id in in_order:
        if session_id in free:
            agent_turn.delay(free[session_id], session_id)
            report.turns += 1

    lost_after = timedelta(0) if restart else voice_lost_after()
    # A suspended workspace's too: its task asks the transcriber nothing and ends them
    # unanswered, as a text message waiting then (qorven.agent.voice.voice_transcribe).
    unheard = pending.filter(metadata__voice="pending", created_at__lte=now - lost_after).order_by("pk")
    for tenant_id, message_id in unheard.values_list("tenant_id", "pk")[:BATCH]:
        if restart or _due(f"qorven:voice-swept:{message_id}", lost_after.total_seconds()):
            voice_transcribe_task.delay(tenant_id, message_id)
            report.voice_notes += 1

    # Every tenant's: each goes to its task with its tenant's id, and is read by both there.
    stuck = InboundEvent.objects.filter(
        Q(state=InboundEvent.State.PENDING, created_at__lte=now - grace)
        | Q(state=InboundEvent.State.PROCESSING, updated_at__lt=now - timedelta(seconds=CLAIM_STALE_AFTER))
    ).order_by("pk")
    for tenant_id, event_id in stuck.values_list("tenant_id", "pk")[:BATCH]:
        inbound_process_task.delay(tenant_id, event_id)
        report.inbound += 1

    report.unplanned = _unplanned_replies_plan(now=now, grace=grace)
    report.interrupted_sends = _interrupted_sends_recover()
    # One reply per binding: its send wakes the next one waiting for that binding
    # (channels_app.send_gate), so a hung platform's queue is not re-sent in full every sweep.
    oldest = (
        OutboundDelivery.objects.filter(state=OutboundDelivery.State.PENDING,
                                        updated_at__lte=now - min(delivery_grace, UNWOKEN_GRACE))
        .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
        .values("binding_id").annotate(first=Min("pk")).values_list("first", flat=True)[:BATCH]
    )
    left = OutboundDelivery.objects.filter(pk__in=list(oldest)).values_list(
        "tenant_id", "message_id", "binding_id", "updated_at")
    for tenant_id, message_id, binding_id, updated_at in left:
        if updated_at > now - delivery_grace and _bot_sending(binding_id):
            continue  # its bot is sending: that send wakes it (or its gate cannot be read: the next pass looks)
        deliver_message_task.delay(tenant_id, message_id)
        report.deliveries += 1
    for tenant_id, heartbeat_id, tick, manual, run_id in heartbeat_runs_recover(restart=restart, limit=BATCH):
        heartbeat_run.delay(tenant_id, heartbeat_id, tick=tick, manual=manual, run_id=run_id)
        report.heartbeat_runs += 1
    for tenant_id, session_id, channel in compact_requests_recover(restart=restart, limit=BATCH):
        session_compact.delay(tenant_id, session_id, channel)
        report.compactions += 1
    report.events_pruned = inbound_events_prune(now=now)
    if report.events_pruned:
        logger.info("sweep: deleted %s finished inbound event(s) past QORVEN_INBOUND_RETENTION", report.events_pruned)
    report.deliveries_pruned = deliveries_prune(now=now)
    if report.deliveries_pruned:
        logger.info("sweep: deleted %s sent reply part(s) past QORVEN_DELIVERY_RETENTION", report.deliveries_pruned)
    report.pairings_pruned = pairings_prune(now=now)
    if report.pairings_pruned:
        logger.info("sweep: deleted %s pairing code(s) that ran out over a week ago", report.pairings_pruned)
    if report:
        logger.info("sweep: queued %s turn(s), %s inbound event(s), %s delivery(ies), %s voice note(s), %s heartbeat "
                    "run(s), %s /compact(s); planned %s reply(ies) never planned; failed %s interrupted send(s)",
                    report.turns, report.inbound, report.deliveries, report.voice_notes, report.heartbeat_runs,
                    report.compactions, report.unplanned, report.interrupted_sends)
    return report
