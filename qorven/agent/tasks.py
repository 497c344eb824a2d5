"""Celery entry points of the agent."""
from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from qorven.runtime.cache_away import cache_or
from qorven.runtime.database import DATABASE_DOWN, DATABASE_RETRY_DELAY, connections_drop_broken
from qorven.runtime.log_context import log_context
from qorven.runtime.repeated_failure import RepeatedFailure
from qorven.runtime.task_scope import task_scope

from .heartbeat_runs import RUN_TRIES, RunFailed, retry_delay, run_heartbeat
from .slot_places import TURN_TASK
from .turns import TurnBusy, turn_process

logger = logging.getLogger(__name__)

# The marks below (the session's waiter, its come-back) spare work: one turn at a time on a
# session is the database's lease (sessions_app.turn_writes), and a turn skips what is
# answered. So with the cache away (Redis down) a turn carries on as if no mark were set:
# a turn finding its session busy waits for it on the worker's timer as its waiter, and a
# come-back runs. Logged once while it lasts.
_marks_away = RepeatedFailure(logger, "turn marks cannot be read or kept in the cache; "
                                      "turns wait and come back without them")


# A turn that finds its session busy comes back after 0.5, 1, 2, 4, 8, then every 10
# seconds — one such task per session (a marker in the cache), however many messages
# queued a turn meanwhile: the turn that runs answers them all. The turn holding the
# session answers what arrived meanwhile anyway: it lets go only in the statement that
# finds nothing left to answer (sessions_app.turn_writes.turn_lease_end). The waiting is
# for a lease left by a dead worker (it runs out within QORVEN_TURN_LEASE; the sweeper
# queues whatever is still unanswered after that).
BUSY_RETRIES = 12
WAITER_TTL = 30  # seconds; renewed by each retry (busy_delay stays well under it)


def busy_delay(busy: int) -> float:
    return min(0.5 * 2**busy, 10.0)


def _waiter_key(session_id: int) -> str:
    return f"turn-waiter:{session_id}"


def _wait_as_the_one(session_id: int, task_id: str) -> bool:
    """One task waits for a busy session, however many messages queued a turn: the turn
    that finally runs answers all of them. True if `task_id` is (or now becomes) it."""
    key = _waiter_key(session_id)
    if (cache_or(True, lambda: cache.add(key, task_id, WAITER_TTL), away=_marks_away)
            or cache_or(None, lambda: cache.get(key), away=_marks_away) == task_id):
        cache_or(None, lambda: cache.touch(key, WAITER_TTL), away=_marks_away)
        return True
    return False


# Which task's come-back on the worker's timer is the session's: the task that last asked
# to come back (a task's retries keep its id; a turn run where its message was stored,
# turns_run, sends its come-back as a turn task whose id it chose first), or the turn a
# freed slot sent for a waiting message (route_slots' wake) that took the session's lease
# after it, which takes the come-back over; one that finds the lease held leaves it to
# the holder's. Another come-back is stale: it ends at once. A turn marks its come-back
# while it still holds the session, not once it has let it go: a slot freed meanwhile
# could send a turn that took the session in between, and marked after it the come-back
# would find that turn holding the session and wait for it. A missing marker (expired,
# the cache flushed) lets a come-back run: a wake that was never sent or never ran loses
# nothing.
COME_BACK_TTL = 3600  # seconds past a come-back's countdown its marker is kept


def _come_back_key(session_id: int) -> str:
    return f"turn-come-back:{session_id}"


def _come_back_stale(session_id: int, task_id: str) -> bool:
    marker = cache_or(None, lambda: cache.get(_come_back_key(session_id)), away=_marks_away)
    return marker is not None and marker != task_id


def _come_back_mark(session_id: int, task_id: str) -> Callable[[], None]:
    """What makes task `task_id` the session's come-back (turns.turn_process runs it)."""
    key = _come_back_key(session_id)

    def mark() -> None:
        cache_or(None, lambda: cache.set(key, task_id, COME_BACK_TTL), away=_marks_away)

    return mark


COMING_BACK = {"busy": 0, "back": True}  # the keyword arguments a turn's come-back is sent with


def _stop_waiting(session_id: int, task_id: str) -> None:
    key = _waiter_key(session_id)
    if cache_or(None, lambda: cache.get(key), away=_marks_away) == task_id:
        cache_or(None, lambda: cache.delete(key), away=_marks_away)


@shared_task(bind=True, name=TURN_TASK, acks_late=True, max_retries=None)
def agent_turn(self, tenant_id: int, session_id: int, busy: int = 0, woken: bool = False,
               back: bool = False) -> int:
    """Answer the session's pending user messages. Safe to run twice: answered messages
    are skipped, and turns on one session never overlap. Comes back later when the
    session is busy (`busy` counts those tries) or a message failed transiently or waits
    for a capped route's slot (`back`; its own tries are counted on the message, up to
    QORVEN_ANSWER_ATTEMPTS). `woken`: sent by a freed slot for the waiting message; it
    takes the session's come-back over."""
    with log_context(tenant=tenant_id, session=session_id), task_scope():
        if back and _come_back_stale(session_id, self.request.id):
            return 0  # a turn woken for the message's slot took over (and runs, or ran, it)
        try:
            outcome = turn_process(tenant_id=tenant_id, session_id=session_id,
                                   come_back_mark=_come_back_mark(session_id, self.request.id), woken=woken)
        except DATABASE_DOWN as exc:
            # The turn let its session go (turns.turn_process) and runs again on a fresh
            # connection; a reply is only ever stored with its message marked answered.
            connections_drop_broken()
            raise self.retry(exc=exc, args=(tenant_id, session_id), kwargs={"busy": busy},
                             countdown=DATABASE_RETRY_DELAY) from None
        except TurnBusy:
            if woken:
                # The turn holding the session answers the waiting message (or comes back
                # for it itself): a woken turn does not wait for the session too.
                return 0
            if not _wait_as_the_one(session_id, self.request.id):
                return 0  # another task already waits for this session; its turn answers this message too
            if busy >= BUSY_RETRIES:
                _stop_waiting(session_id, self.request.id)
                logger.info("session %s stayed busy; leaving its messages to the turn holding it", session_id)
                return 0
            raise self.retry(args=(tenant_id, session_id), kwargs={"busy": busy + 1}, countdown=busy_delay(busy)) from None
        if busy:  # only a task that found the session busy can be its waiter (its retries count up)
            _stop_waiting(session_id, self.request.id)
        if outcome.retry_after is not None:
            raise self.retry(args=(tenant_id, session_id), kwargs=COMING_BACK, countdown=outcome.retry_after)
        return outcome.answered


def turns_run(turns: list[tuple[int, int]]) -> None:
    """Run turns collected by qorven.agent.gateway.turns_here in the calling task (the one
    that stored their messages), instead of a task of their own each. A session another
    turn holds, a message that failed transiently or a lost database connection goes to
    the turn task as usual."""
    for tenant_id, session_id in turns:
        with log_context(tenant=tenant_id, session=session_id):
            task_id = str(uuid.uuid4())  # its come-back's, if it has one
            try:
                outcome = turn_process(tenant_id=tenant_id, session_id=session_id,
                                       come_back_mark=_come_back_mark(session_id, task_id))
            except DATABASE_DOWN:
                connections_drop_broken()
                agent_turn.apply_async((tenant_id, session_id), countdown=DATABASE_RETRY_DELAY)
                continue
            except TurnBusy:
                agent_turn.delay(tenant_id, session_id)  # it waits for the session (see above)
                continue
            if outcome.retry_after is not None:
                # The session's come-back, as the turn task's own: a turn woken for the
                # message's slot ends it (a come-back unmarked found the woken turn holding
                # the session and waited for it, up to BUSY_RETRIES times).
                agent_turn.apply_async((tenant_id, session_id), COMING_BACK, countdown=outcome.retry_after,
                                       task_id=task_id)


def turns_queue(turns: list[tuple[int, int]]) -> None:
    """Send collected turns to the broker after all (their task is giving up its slot)."""
    for tenant_id, session_id in turns:
        agent_turn.delay(tenant_id, session_id)


def voice_backoff(tries: int) -> float:
    """Seconds before trying a voice note again after `tries` transient failures:
    QORVEN_VOICE_RETRY_DELAY, then four times as long each time (at most five minutes)."""

    return min(settings.QORVEN_VOICE_RETRY_DELAY * 4 ** tries, 300.0)


@shared_task(bind=True, name="qorven.agent.voice_transcribe", acks_late=True, max_retries=None)
def voice_transcribe_task(self, tenant_id: int, message_id: int) -> str:
    """Transcribe a stored message's voice notes (qorven.agent.voice). Safe to run twice.
    A transcriber that is down (5xx, timeouts, rate limits past the call's own retries) is
    tried again after a backoff, QORVEN_VOICE_RETRIES times; a refusal, or the last try
    failing, settles the message with one notice at once."""

    from .voice import TranscribeLater, voice_transcribe

    tries = self.request.retries or 0
    with log_context(tenant=tenant_id, message_id=message_id):
        try:
            return voice_transcribe(tenant_id=tenant_id, message_id=message_id,
                                    last_try=tries >= settings.QORVEN_VOICE_RETRIES)
        except TranscribeLater as exc:
            countdown = max(exc.after or 0.0, voice_backoff(tries))
            raise self.retry(countdown=countdown) from None


# --- heartbeats -------------------------------------------------------------------------------
# Celery beat's DatabaseScheduler sends `heartbeats_app.run` (the name its PeriodicTask rows
# carry: heartbeats_app.services.RUN_TASK) for each due beat; "run now" sends it with
# manual=True.

# Retry policy: a run whose model was unavailable is retried twice, after
# QORVEN_HEARTBEAT_RETRY_DELAY and four times that (1 and 4 minutes by default; the provider
# already retried with backoff within the call), counted on the run (a retry the sweeper
# queued again counts the same). A run whose capped route's slots could not be read (Redis
# away) comes back for them after a few seconds, as a turn does, with no try used (near its
# tick). Other failures are bugs or bad configuration: recorded with their error, not retried.
@shared_task(bind=True, name="heartbeats_app.run", acks_late=True, max_retries=None)
def heartbeat_run(
    self, tenant_id: int, heartbeat_id: int, tick: str | None = None, manual: bool = False, run_id: int | None = None
) -> str:
    """Run one beat for one tick. Safe to run twice: the second run of a tick does nothing."""
    try:
        with task_scope():
            run = run_heartbeat(
                tenant_id=tenant_id, heartbeat_id=heartbeat_id, tick=datetime.fromisoformat(tick) if tick else None,
                manual=manual, run_id=run_id,
            )
    except RunFailed as exc:
        if exc.attempts >= RUN_TRIES:
            return "failed"
        kwargs = {"tenant_id": tenant_id, "heartbeat_id": heartbeat_id, "tick": tick, "manual": manual,
                  "run_id": exc.run_id}
        countdown = exc.after if exc.after is not None else retry_delay(exc.attempts)
        raise self.retry(exc=exc, kwargs=kwargs, countdown=countdown) from None
    return run.status if run is not None else "nothing to do"
