"""What the memory flush found, stored as `remember` stores a note.

A person's conversation: through the same service as the tool (person_memories), inside
compaction's one transaction. A note the flush says is already kept is that note said
again; one that corrects kept notes takes their place (deleted, their text taken out of
what conversations kept of them). Only the notes the flush was shown may be named, and
only the person's own are ever touched. Each note is dated by the line it came from, and
one drawn from a line older than a note it names corrects nothing: the newer holds. A
reminder's period is when it comes due and when it reached the person
(memory_app.reminders): one with a due time starts then, one without has none (undated:
never due, and never read as due at the conversation's start and done by its end).

A conversation with no one person (a group chat) keeps its notes as the Qor's, as before.
"""
from __future__ import annotations

import logging
from datetime import datetime

from django.contrib.auth.models import User

from sessions_app.models import Session

from .models import Memory
from .person_memories import MemoryMissing, Superseded, memory_known_again, memory_remember
from .services import memory_add, reminder_add
from .summarizer.condense import Condensed, FlushedMemory

logger = logging.getLogger("memory_app.summarizer")


def flushed_store(*, session: Session, condensed: Condensed) -> int:
    """Store the run's flushed notes; returns how many are new."""
    span = condensed.excerpt.span
    stored = 0
    for note in condensed.memories:
        at = note.said_at or span.last_at
        if session.user is not None:
            stored += _remembered(session, session.user, note, at, condensed)
        else:
            stored += _kept_for_the_qor(session, note, at, condensed)
    return stored


def _remembered(session: Session, user: User, note: FlushedMemory, at: datetime | None, condensed: Condensed) -> int:
    owner = dict(tenant=session.tenant, qor=session.qor, user=user)
    if note.known is not None and note.known in condensed.shown:
        if at is not None:
            try:
                memory_known_again(**owner, memory_id=note.known, at=at)  # type: ignore[arg-type]
            except MemoryMissing:
                pass  # forgotten meanwhile: what the person had forgotten is not brought back
        return 0
    replaces = [pk for pk in dict.fromkeys(note.replaces) if pk in condensed.shown]
    while True:
        try:
            done = memory_remember(
                **owner, type=note.type, content=note.content, replaces=replaces, due=note.due,  # type: ignore[arg-type]
                channels=condensed.excerpt.span.channels, source_session_id=session.pk, said_at=at,
            )
        except MemoryMissing as exc:
            replaces.remove(exc.memory_id)  # forgotten meanwhile; the note itself is still news
            continue
        except Superseded as exc:
            logger.info("memory flush for session %s: a note left out: %s", session.pk, exc)
            return 0
        return int(done.created)


def _kept_for_the_qor(session: Session, note: FlushedMemory, at: datetime | None, condensed: Condensed) -> int:
    owner = dict(tenant=session.tenant, qor=session.qor, user=None, channels=condensed.excerpt.span.channels,
                 source_session_id=session.pk)
    if note.due is not None:
        return int(reminder_add(content=note.content, due=note.due, **owner)[1])  # type: ignore[arg-type]
    if note.type == Memory.Type.REMINDER:
        return int(memory_add(type=note.type, content=note.content, **owner)[1])  # type: ignore[arg-type]
    return int(memory_add(type=note.type, content=note.content, period_start=at, period_end=at,  # type: ignore[arg-type]
                          **owner)[1])
