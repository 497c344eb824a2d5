"""Compaction: condense the oldest messages of a session and store what they held.

- `compaction_advance` (auto mode, the summarizer task): condense the next run of
  messages up to a seq, advance `compacted_through_seq`, keep the running note on the
  session, and, once it has caught up, post the note as a visible system message: a
  backlog that takes many runs (an imported conversation) gets one notice, not one a
  run. Raw rows stay.
- `compaction_rotate` (manual mode, `/compact`): condense everything already answered,
  then archive the session and start a fresh one seeded with the summary, carrying the
  messages still waiting for an answer.

Before anything is condensed, the memory flush stores the run's facts, reminders and open
tasks, as `remember` would (memory_app.flushed_notes). Model calls happen outside any
transaction; the results are stored in one, which applies only if nobody compacted the
session meanwhile, so a failure or a race stores nothing and loses nothing.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime

from django.db import transaction

from sessions_app.channel_kinds import Channel
from sessions_app.errors import SessionClosed
from sessions_app.models import Message, Session
from sessions_app.selectors import next_pending_user_message
from sessions_app.services.append import message_append
from sessions_app.services.lifecycle import session_compaction_advance, session_rotate

from .digest import DigestSpan, digest_plain_extract
from .models import Memory
from .flushed_notes import flushed_store
from .services import memory_add
from .summarizer.condense import Condensed, condense
from .summarizer.excerpts import excerpt_read, input_budget
from .compact_hooks import compact_start_hooks
from .summarizer.model_answers import CompactionFailed

logger = logging.getLogger(__name__)

__all__ = ["AdvanceOutcome", "CatchUp", "CompactionFailed", "RotateOutcome", "catch_up_announce",
           "compact_start_hooks", "compaction_advance", "compaction_rotate", "settled_through"]



@dataclass(frozen=True)
class CatchUp:
    """What the runs of one catch-up have condensed so far: the summarizer runs again and
    again until it reaches its target, and the notice at the end covers them all. Passed
    from run to run as the summarizer task's argument (`as_arg`, `from_arg`)."""

    from_seq: int
    through_seq: int
    span: DigestSpan
    memories: int

    def add(self, through_seq: int, span: DigestSpan, memories: int) -> CatchUp:
        return replace(self, through_seq=through_seq, span=_merged_span([self.span, span]),
                       memories=self.memories + memories)

    def as_arg(self) -> dict[str, object]:
        return {"from_seq": self.from_seq, "through_seq": self.through_seq, "count": self.span.count,
                "channels": sorted(self.span.channels), "first_at": _iso(self.span.first_at),
                "last_at": _iso(self.span.last_at), "memories": self.memories}

    @classmethod
    def from_arg(cls, arg: dict[str, object] | None) -> CatchUp | None:
        if not arg:
            return None
        span = DigestSpan(count=int(arg["count"]), channels=frozenset(arg["channels"]),
                          first_at=_datetime(arg["first_at"]), last_at=_datetime(arg["last_at"]))
        return cls(int(arg["from_seq"]), int(arg["through_seq"]), span, int(arg["memories"]))


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def _datetime(value: object) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


@dataclass(frozen=True)
class AdvanceOutcome:
    through_seq: int  # the session is now compacted through this seq
    messages: int  # conversation messages condensed by this call
    memories: int  # memories stored (flush and digest)
    more: bool  # the target was not reached in this run: run again
    so_far: CatchUp | None = None  # with `more`: what the catch-up condensed, not yet announced


@dataclass(frozen=True)
class RotateOutcome:
    archived: Session | None  # None when compacted in place (not a rotating kind)
    session: Session  # the active session now: the fresh one, or the same one
    carried: list[Message]
    messages: int
    memories: int
    note: str

    @property
    def rotated(self) -> bool:
        return self.archived is not None


# Sessions that rotate: the one chat of a person (or of a legacy thread). A group chat, an
# email thread or a cron run keeps its own session and is compacted in place instead.
ROTATING_KINDS = (Session.Kind.CANONICAL, Session.Kind.LEGACY)


def settled_through(session: Session) -> int:
    """The last seq before the first user message still waiting for an answer (or the
    last seq): what may be compacted without taking a question out from under a turn."""
    pending = next_pending_user_message(session=session)
    return pending.seq - 1 if pending is not None else session.last_seq


def compaction_advance(*, session: Session, through_seq: int, so_far: CatchUp | None = None) -> AdvanceOutcome:
    """Condense the next run of `session` up to `through_seq` (as much as one summarizer
    call takes) and store it; `so_far`, what earlier runs of this catch-up condensed. The
    notice goes into the timeline once the target is reached. Raises CompactionFailed
    (`so_far` is the caller's to announce then); a no-op when already done."""
    start = session.compacted_through_seq
    target = min(through_seq, settled_through(session))
    if target <= start or session.state != Session.State.ACTIVE:
        if so_far is not None:
            catch_up_announce(session=session, so_far=so_far)
        return AdvanceOutcome(start, 0, 0, more=False)
    note = session.compaction_note
    excerpt = excerpt_read(session=session, after_seq=start, through_seq=target, budget=input_budget(session.qor, note))
    condensed = condense(session=session, excerpt=excerpt, previous_note=note) if excerpt.messages else None
    more = excerpt.through_seq < target
    with transaction.atomic():
        new_note = condensed.note if condensed else note
        if not session_compaction_advance(
            session_id=session.pk, from_seq=start, through_seq=excerpt.through_seq, note=new_note
        ):
            raise CompactionFailed("the session changed while it was being compacted")
        stored = _store(session, condensed) if condensed else 0
        if condensed:
            run = CatchUp(start + 1, excerpt.through_seq, condensed.excerpt.span, stored)
            so_far = so_far.add(excerpt.through_seq, run.span, stored) if so_far is not None else run
        if so_far is not None and not more:
            _announce(session, so_far, new_note)
    session.compacted_through_seq, session.compaction_note = excerpt.through_seq, new_note
    return AdvanceOutcome(excerpt.through_seq, len(excerpt.messages), stored, more=more,
                          so_far=so_far if more else None)


def catch_up_announce(*, session: Session, so_far: CatchUp) -> None:
    """The notice for a catch-up that stops before its target (its next run failed, or
    found nothing left to do): what it did condense."""
    if session.state != Session.State.ACTIVE:
        return
    try:
        _announce(session, so_far, session.compaction_note)
    except SessionClosed:  # archived a moment ago (/clear): its notices end there
        pass


def _announce(session: Session, so_far: CatchUp, note: str) -> None:
    message_append(
        session=session, role=Message.Role.SYSTEM, channel=Channel.SYSTEM,
        content=_condensed_note(so_far.span, so_far.memories, note),
        metadata={"notice": "compaction", "from_seq": so_far.from_seq, "through_seq": so_far.through_seq,
                  "memories": so_far.memories},
    )


def compaction_rotate(*, session: Session) -> RotateOutcome | None:
    """Condense everything answered so far, then archive `session` and start a fresh one
    seeded with the summary (a session of a kind that does not rotate is compacted in
    place: its note joins its prompt). None when there is nothing to condense. Raises
    CompactionFailed (nothing stored, nothing rotated) or SessionClosed."""
    rotate = session.kind in ROTATING_KINDS
    start = session.compacted_through_seq
    target = settled_through(session)
    seeds = (session.seed_summary, session.compaction_note) if rotate else (session.compaction_note,)
    note = "\n\n".join(p.strip() for p in seeds if p.strip())
    runs: list[Condensed] = []
    cursor = start
    while cursor < target:
        excerpt = excerpt_read(session=session, after_seq=cursor, through_seq=target,
                               budget=input_budget(session.qor, note))
        if excerpt.messages:
            runs.append(condense(session=session, excerpt=excerpt, previous_note=note))
            note = runs[-1].note
        cursor = excerpt.through_seq
    if not runs:
        return None
    with transaction.atomic():
        if not session_compaction_advance(session_id=session.pk, from_seq=start, through_seq=cursor, note=note):
            raise CompactionFailed("the session changed while it was being compacted")
        stored = sum(_store(session, run) for run in runs)
        messages = sum(len(run.excerpt.messages) for run in runs)
        span = _merged_span([run.excerpt.span for run in runs])
        if rotate:
            rotated = session_rotate(session=session, seed_summary=note, carry_unanswered=True)
            archived, active, carried = rotated.archived, rotated.session, rotated.carried
            text = _rotation_note(span, stored, note)
        else:
            session.compacted_through_seq, session.compaction_note = cursor, note
            archived, active, carried = None, session, []
            text = _condensed_note(span, stored, note)
        message_append(
            session=active, role=Message.Role.SYSTEM, channel=Channel.SYSTEM, content=text,
            metadata={"notice": "compaction", "compacted_session": session.pk, "through_seq": cursor,
                      "memories": stored},
        )
    return RotateOutcome(archived, active, carried, messages, stored, note)


def _store(session: Session, condensed: Condensed) -> int:
    """The flushed memories (as `remember` stores a note: memory_app.flushed_notes) and the
    run's conversation digest and running summary, which cover the run's date range;
    returns how many are new."""
    span = condensed.excerpt.span
    common = dict(tenant=session.tenant, qor=session.qor, user=session.user, channels=span.channels,
                  source_session_id=session.pk, period_start=span.first_at, period_end=span.last_at)
    stored = flushed_store(session=session, condensed=condensed)
    readers = [session.user] if session.user is not None else _members_heard(condensed.excerpt) or [None]
    note = condensed.note
    if session.kind == Session.Kind.GROUP and note.strip():
        # Kept in each member's own memory: it says whose conversation it sums up.
        note = f"Group chat on {', '.join(sorted(span.channels))}, summed up from its start:\n{note}"
    for reader in readers:
        if condensed.digest.strip():
            stored += memory_add(type=Memory.Type.CONVERSATION_DIGEST, content=condensed.digest,
                                 **{**common, "user": reader})[1]
        if note.strip():
            # The running summary as it stood after this run: the whole conversation so
            # far, from its start (the digest covers this run alone).
            stored += memory_add(type=Memory.Type.SUMMARY, content=note,
                                 **{**common, "user": reader, "period_start": session.started_at})[1]
    return stored


def _members_heard(excerpt) -> list:
    """A group chat has no one owner: its digest goes to each paired member who spoke in
    the run (their messages carry `user_id`), so their own turns find it through memory."""
    from django.contrib.auth import get_user_model

    ids = {m.metadata.get("user_id") for m in excerpt.messages if isinstance(m.metadata, dict)}
    ids.discard(None)
    return list(get_user_model().objects.filter(pk__in=ids).order_by("pk")) if ids else []


def _merged_span(spans: list[DigestSpan]) -> DigestSpan:
    return DigestSpan(
        count=sum(s.count for s in spans),
        channels=frozenset().union(*(s.channels for s in spans)),
        first_at=min((s.first_at for s in spans if s.first_at), default=None),
        last_at=max((s.last_at for s in spans if s.last_at), default=None),
    )


def _condensed_note(span: DigestSpan, stored: int, note: str) -> str:
    header = digest_plain_extract([], span=span)
    return f"Condensed earlier messages. {header} {_saved(stored)}\nWhat I keep in mind:\n{note}"


def _rotation_note(span: DigestSpan, stored: int, note: str) -> str:
    header = digest_plain_extract([], span=span)
    return f"Continued from an earlier conversation. {header} {_saved(stored)}\nWhat I keep in mind:\n{note}"


def _saved(stored: int) -> str:
    return f"{counted(stored, 'note')} saved to memory."


def counted(number: int, noun: str) -> str:
    """`1 message`, `4 messages`: the counts a compaction's notices give."""
    return f"{number} {noun}{'s' if number != 1 else ''}"
