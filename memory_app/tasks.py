"""Celery entry points of memory: the summarizer sub-agent and `/compact`."""
from __future__ import annotations

import logging
import time
import uuid
from contextlib import ExitStack

from celery import current_app, shared_task
from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from qorven.llm import WaitingForSlot
from qorven.runtime.cache_away import CACHE_RETRY_DELAY, cache_or, cache_unreachable
from qorven.runtime.cache_leases import cache_lease
from qorven.runtime.log_context import log_context
from qorven.runtime.repeated_failure import RepeatedFailure
from sessions_app.errors import SessionClosed
from sessions_app.leases import lease_kept
from sessions_app.models import Message, Session
from sessions_app.selectors import (
    last_user_message_at,
    next_pending_user_message,
    session_for_task,
    session_successor,
)
from sessions_app.services.append import message_append
from sessions_app.turn_writes import turn_lease_acquire, turn_lease_release
from tenancy.access import tenant_serving
from tenancy.selectors import budget_exhausted

from .compact_requests import compact_request_done, compact_request_pending
from .compaction import (
    CatchUp,
    CompactionFailed,
    catch_up_announce,
    compact_start_hooks,
    compaction_advance,
    compaction_rotate,
    counted,
)

logger = logging.getLogger(__name__)
_summarizer_away = RepeatedFailure(logger, "the summarizer cannot be queued with the cache away; "
                                           "the next exchange over budget queues it")
_cache_away = RepeatedFailure(logger, "the summarizer cannot read its session's lease or waiting mark with the "
                                      f"cache away; a run comes back every {CACHE_RETRY_DELAY:.0f} s")

COMPACTED_NOTICE = (
    "Compacted this conversation: {messages} summarized, {memories} saved to memory. "
    "This is a fresh conversation that starts from the summary; the old one is archived."
)
NOTHING_NOTICE = "There is nothing to compact yet."
FAILED_NOTICE = "I could not compact this conversation ({reason}). Nothing was changed."
LEASE_RETRY_DELAY = 2.0
TURN_TASK = "qorven.agent.turn"  # qorven.agent.tasks.agent_turn, sent by name from below the agent
# A summarizer that a busy conversation keeps waiting runs after this many quiet periods.
SUMMARIZER_WAIT_MAX = 12


@shared_task(name="memory_app.summarize", acks_late=True)
def session_summarize(tenant_id: int, session_id: int, through_seq: int, waiting_since: float | None = None,
                      so_far: dict | None = None, slot_since: float | None = None) -> int:
    """Auto mode: condense the session's messages up to `through_seq` into its running
    note, a digest memory and the flushed memories. Runs again while a run is left,
    passing on what the catch-up condensed so far (`so_far`, for its one notice at the
    end). Safe to run twice: a range already compacted is skipped. Returns messages
    condensed.

    It leaves the conversation to the person's turns: while a turn runs, or they wrote in
    the last QORVEN_SUMMARIZER_QUIET seconds, it queues itself for when that will have
    passed (the model and the CPUs answer them first), for at most SUMMARIZER_WAIT_MAX
    quiet periods since it first waited (`waiting_since`, a Unix time).

    A run that found no slot of its capped route (every one taken for its wait, or the
    slots unreadable while Redis was away) comes back for one a few seconds later, up to
    QORVEN_MODEL_DEADLINE since it first found none (`slot_since`), as a turn waits for
    a slot: the range is not left uncompacted until the person's next exchange.

    A run that finds the cache (Redis) away before it starts — where its lease, one run
    per session, and the newest point asked for are kept — comes back after
    CACHE_RETRY_DELAY, within the same deadline (`slot_since`), having called no model:
    run without its lease, a second run of the session could make the same model calls.

    In a workspace the host suspended meanwhile it does nothing (no model call, nothing
    said): the range stays uncompacted, and the first exchange over the window after
    resume queues a run that condenses it all."""
    with log_context(tenant=tenant_id, session=session_id):
        session = session_for_task(tenant_id=tenant_id, session_id=session_id)
        if session is None or session.state != Session.State.ACTIVE:
            return 0
        if not tenant_serving(session.tenant):
            # The first exchange after resume queues a run at once (with the cache away,
            # once the mark has run out).
            cache_or(None, lambda: cache.delete(_waiting_key(session_id)), away=_cache_away)
            return 0
        catch_up = CatchUp.from_arg(so_far)
        if budget_exhausted(tenant=session.tenant):
            _catch_up_end(session, catch_up)
            return 0
        quiet = settings.QORVEN_SUMMARIZER_QUIET
        wait = _until_quiet(session, quiet) if quiet > 0 else 0.0
        since = waiting_since if waiting_since is not None else time.time()
        if wait > 0 and time.time() - since < SUMMARIZER_WAIT_MAX * quiet:
            session_summarize.apply_async((tenant_id, session_id, through_seq, since, so_far), countdown=wait)
            return 0
        with ExitStack() as held:
            try:
                # From here on, an exchange over the window queues a run of its own.
                through_seq = max(through_seq, cache.get(_waiting_key(session_id)) or 0)
                cache.delete(_waiting_key(session_id))
                # One summarizer per session at a time, across workers (the cache is Redis when
                # scaled out): a second run would only repeat the model calls, since the
                # compare-and-set stores one result. A range it skips is queued again by the next
                # exchange over budget. A lease, renewed while the run runs: a worker killed
                # mid-run keeps the next run away for QORVEN_TURN_LEASE seconds, not for the task
                # time limit.
                taken = held.enter_context(
                    cache_lease(f"qorven:summarize:{session_id}", seconds=settings.QORVEN_TURN_LEASE))
            except Exception as exc:
                if not cache_unreachable(exc):
                    raise
                # Transient, and nothing done yet: come back with the newest point read.
                _cache_away.failed(type(exc).__name__)
                if not _come_back(tenant_id, session_id, through_seq, so_far, slot_since, CACHE_RETRY_DELAY):
                    _catch_up_end(session, catch_up)
                return 0
            _cache_away.succeeded()
            if not taken:
                logger.info("summarizer for session %s is already running; skipped", session_id)
                _catch_up_end(session, catch_up)
                return 0
            try:
                outcome = compaction_advance(session=session, through_seq=through_seq, so_far=catch_up)
            except CompactionFailed as exc:
                # Nothing was stored; the next exchange over budget queues this again.
                logger.warning("could not compact session %s: %s", session_id, exc)
                if exc.slot_wait is not None and _come_back(
                        tenant_id, session_id, through_seq, so_far, slot_since, exc.slot_wait):
                    return 0
                _catch_up_end(session, catch_up)
                return 0
        if outcome.more:
            so_far = outcome.so_far.as_arg() if outcome.so_far is not None else None
            session_summarize.delay(tenant_id, session_id, through_seq, None, so_far)
        return outcome.messages


def _come_back(tenant_id: int, session_id: int, through_seq: int, so_far: dict | None,
               slot_since: float | None, after: float) -> bool:
    """Queue the run again for a slot of its capped route, or for the cache to be back,
    within QORVEN_MODEL_DEADLINE of its first finding either away. False when past it, or
    when the broker refused (Redis away with the slots): the next exchange over the window
    queues it then."""
    since = slot_since if slot_since is not None else time.time()
    if time.time() - since > settings.QORVEN_MODEL_DEADLINE:
        logger.warning("the summarizer of session %s waited %.0f s; left to the next exchange over the window",
                       session_id, time.time() - since)
        return False
    try:
        session_summarize.apply_async((tenant_id, session_id, through_seq, None, so_far, since), countdown=after)
    except Exception as exc:
        logger.warning("could not queue the summarizer of session %s again (%s)", session_id, type(exc).__name__)
        return False
    return True


def _catch_up_end(session: Session, catch_up: CatchUp | None) -> None:
    """A catch-up stopping before its target still says what it condensed."""
    if catch_up is not None:
        session.refresh_from_db(fields=["state", "compaction_note"])
        catch_up_announce(session=session, so_far=catch_up)


def summarize_soon(*, tenant_id: int, session_id: int, through_seq: int) -> None:
    """Queue the summarizer for a session whose conversation outgrew the window, to run
    once it is quiet. While one is waiting, no second one is queued: the waiting one
    condenses through the newest point asked for (kept in the cache with it)."""
    key, quiet = _waiting_key(session_id), settings.QORVEN_SUMMARIZER_QUIET
    kept_for = int(quiet * (SUMMARIZER_WAIT_MAX + 2)) + 1  # past the waiting run's longest wait
    # Run after the reply's commit: the cache away (Redis down) must not fail the turn that
    # stored it. The run (whose lease is in the cache too) is left to the next exchange over
    # budget, as a range a run skips is.
    if quiet > 0 and not cache_or(False, lambda: _first_waiting(key, through_seq, kept_for=kept_for),
                                  away=_summarizer_away):
        return
    session_summarize.apply_async((tenant_id, session_id, through_seq), countdown=quiet)


def _first_waiting(key: str, through_seq: int, *, kept_for: int) -> bool:
    """Whether no run waits for the session yet: this one is to be queued. Else the one
    waiting condenses through `through_seq` too."""
    if cache.add(key, through_seq, timeout=kept_for):
        return True
    if through_seq > (cache.get(key) or 0):
        cache.set(key, through_seq, timeout=kept_for)
    return False


def _waiting_key(session_id: int) -> str:
    return f"qorven:summarize-waiting:{session_id}"


def _until_quiet(session: Session, quiet: float) -> float:
    """Seconds until `session` has been quiet for `quiet` seconds: no turn running (its
    lease held) and no message from the person in that time; 0 when it has."""
    now = timezone.now()
    if session.turn_owner and session.turn_lease_until is not None and session.turn_lease_until > now:
        return quiet
    wrote = last_user_message_at(session=session)
    return 0.0 if wrote is None else max(0.0, quiet - (now - wrote).total_seconds())


@shared_task(bind=True, name="memory_app.compact", acks_late=True, max_retries=30)
def session_compact(self, tenant_id: int, session_id: int, channel: str, owner: str = "") -> bool:
    """`/compact`: summarize the session into memory and rotate to a fresh one seeded with
    the summary. `owner` is the session lease the command took for it; a running turn is
    waited for (it holds the lease meanwhile). Runs while its request is recorded
    (memory_app.compact_requests), which it ends with the notice of its outcome: safe to
    run twice, and the sweeper queues it again when its worker died. True when it rotated.

    In a workspace the host suspended meanwhile it lets the session go and does nothing
    (no model call, nothing said): the request stays recorded, and the sweeper queues it
    once the workspace is resumed (compact_requests_recover passes it over till then)."""
    with log_context(tenant=tenant_id, session=session_id):
        owner = owner or f"compact-{uuid.uuid4().hex}"
        session = session_for_task(tenant_id=tenant_id, session_id=session_id)
        if session is None or session.state != Session.State.ACTIVE:
            turn_lease_release(session_id=session_id, owner=owner)
            compact_request_done(tenant_id=tenant_id, session_id=session_id)
            return False
        if not tenant_serving(session.tenant):
            turn_lease_release(session_id=session_id, owner=owner)
            return False
        if not turn_lease_acquire(session_id=session_id, owner=owner, seconds=settings.QORVEN_TURN_LEASE):
            raise self.retry(countdown=LEASE_RETRY_DELAY)  # a turn is running: come back after it
        try:
            rotated = _compact_held(session, channel, owner, can_wait=self.request.retries < self.max_retries)
        except SlotsAway as away:
            # The summarizer's capped route's slots could not be read (Redis away): come
            # back for them, as a turn does, the chat let go meanwhile and the request kept.
            raise self.retry(countdown=away.after) from None
        finally:
            turn_lease_release(session_id=session_id, owner=owner)
        _turn_for_waiting(session=session)
        return rotated


class SlotsAway(Exception):
    """A /compact's summarizer call found its capped route's slots unreadable (Redis
    away): it comes back after `after` seconds instead of failing."""

    def __init__(self, after: float) -> None:
        super().__init__(f"the summarizer route's slots could not be read; back in {after:.1f} s")
        self.after = after


def _compact_held(session: Session, channel: str, owner: str, *, can_wait: bool = False) -> bool:
    """The /compact itself, with the session's lease held by `owner`. `can_wait`: the
    task may come back (SlotsAway) when the summarizer's slots cannot be read."""
    session.refresh_from_db()
    tenant_id, session_id = session.tenant_id, session.pk
    if session.state != Session.State.ACTIVE or not compact_request_pending(tenant_id=tenant_id, session_id=session_id):
        compact_request_done(tenant_id=tenant_id, session_id=session_id)
        return False  # compacted or cleared already, or its outcome was told
    for hook in compact_start_hooks:
        hook(session)
    try:
        with lease_kept(session_id=session_id, owner=owner):  # the model calls may take a while
            outcome = compaction_rotate(session=session)
    except (CompactionFailed, SessionClosed) as exc:
        if can_wait and isinstance(exc, CompactionFailed) and isinstance(exc.__cause__, WaitingForSlot):
            raise SlotsAway(exc.slot_wait or 1.0) from None
        _notice(session, channel, FAILED_NOTICE.format(reason=_reason(exc)), "compact_failed")
        return False
    if outcome is None:
        _notice(session, channel, NOTHING_NOTICE, "compact_empty")
        return False
    _notice(outcome.session, channel,
            COMPACTED_NOTICE.format(messages=counted(outcome.messages, "message"),
                                    memories=counted(outcome.memories, "note")), "compacted",
            request_of=session_id)
    return True


def _turn_for_waiting(*, session: Session) -> None:
    """Once a /compact let go of the chat: queue a turn when a message waits for an answer
    in it (in the fresh session, when the compaction carried it there). A message sent
    during a long compaction had its own turn give up on the held chat after its retries,
    and would otherwise wait for the sweeper's grace and interval."""
    session.refresh_from_db(fields=["state"])
    current = session if session.state == Session.State.ACTIVE else session_successor(session=session)
    if current is None or next_pending_user_message(session=current) is None:
        return
    tenant_id, session_id = current.tenant_id, current.pk
    transaction.on_commit(lambda: _turn_send(tenant_id, session_id))


def _turn_send(tenant_id: int, session_id: int) -> None:
    # By name, as the sweeper's turns arrive: the turn is the agent's task, above this app.
    try:
        current_app.send_task(TURN_TASK, args=(tenant_id, session_id))
    except Exception as exc:  # a broker that refuses: the message stays pending for the sweeper
        logger.warning("could not queue the turn of session %s (%s); the sweeper will", session_id,
                       type(exc).__name__)


def _notice(session: Session, channel: str, content: str, notice: str, *, request_of: int | None = None) -> None:
    """The outcome of a /compact, and the end of its request (of `request_of`, the session
    it was asked in, when that is not `session`), at once."""
    with transaction.atomic():
        compact_request_done(tenant_id=session.tenant_id, session_id=request_of or session.pk)
        try:
            message_append(session=session, role=Message.Role.SYSTEM, content=content, channel=channel,
                           metadata={"notice": notice})
        except SessionClosed:
            pass  # cleared meanwhile: the person has moved on


def _reason(exc: Exception) -> str:
    """What a person may read of why compaction failed: our words, never the provider's."""
    return getattr(exc, "reason", "") or "the conversation changed while it was being compacted"


@shared_task(name="memory_app.voice_digest", acks_late=True, bind=True, max_retries=5)
def voice_digest(self, tenant_id: int, session_id: int) -> int:
    """Condense a voice call's session into the person's memories (a conversation digest,
    and the facts and reminders the summarizer finds), then close the session. Safe to run
    twice: a compacted range is not condensed again. Returns the memories stored.

    In a workspace the host suspended meanwhile it does nothing (no model call): the call
    stays an active session, digested when the workspace is resumed (voice_digests_resume)."""
    from sessions_app.services.lifecycle import session_archive

    with log_context(tenant=tenant_id, session=session_id):
        session = session_for_task(tenant_id=tenant_id, session_id=session_id)
        if session is None or session.state != Session.State.ACTIVE or not tenant_serving(session.tenant):
            return 0
        try:
            outcome = compaction_rotate(session=session)
        except CompactionFailed as exc:
            logger.warning("could not digest voice session %s: %s", session_id, exc)
            raise self.retry(countdown=30 * 2**self.request.retries) from None
        session_archive(session_id=session_id)
        return outcome.memories if outcome is not None else 0
