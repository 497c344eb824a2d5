"""What the memory flush knows before it reads an excerpt, and when each note was said.

The flush is shown the person's notes that look related to what the excerpt's lines say
(as `remember` shows the model the notes related to a new one), numbered and dated, so it
can say that a note is already kept, in other words, or which kept notes a new one
corrects. Each flushed note is dated by the line it came from: the time the model read on
it, or else the last line that shares the most of its words.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, tzinfo

from django.contrib.auth.models import User

from sessions_app.models import Message, Session
from sessions_app.selectors import MessageRow

from ..fulltext import memory_terms
from ..models import Memory
from ..person_memories import memory_line
from ..selectors import memories_related
from .excerpts import KNOWN_NOTES_MAX_CHARS, Excerpt

# At most this many of the person's notes, each cut to NOTE_CHARS, and all of them to
# KNOWN_MAX_CHARS: the flush reads them where the summary reads its previous note, and
# the excerpt's budget leaves room for either (excerpts.input_budget).
KNOWN_SHOWN = 12
NOTE_CHARS = 200
KNOWN_MAX_CHARS = KNOWN_NOTES_MAX_CHARS
# The person's newest lines of an excerpt whose related notes are looked for, and how many
# notes each brings at most.
LINES_SEARCHED = 30
PER_LINE = 3

# How a line's time is written in the transcript (excerpts.transcript_line), in UTC.
STAMP = "%Y-%m-%d %H:%M"


def known_notes(*, session: Session, excerpt: Excerpt) -> list[Memory]:
    """The person's notes (facts, lessons, reminders) related to their lines in `excerpt`,
    oldest said first; none for a conversation with no one person (a group chat): no one's
    notes are theirs to correct."""
    user = session.user
    if user is None:
        return []
    found: dict[int, Memory] = {}
    lines = [m for m in excerpt.messages if m.role == Message.Role.USER and (m.content or "").strip()]
    for message in reversed(lines[-LINES_SEARCHED:]):
        for memory in memories_related(tenant=session.tenant, qor=session.qor, user=user, content=message.content,
                                       exclude=set(found), limit=PER_LINE):
            found[memory.pk] = memory
        if len(found) >= KNOWN_SHOWN:
            break
    return sorted(list(found.values())[:KNOWN_SHOWN], key=lambda m: (m.said_at, m.pk))


def known_block(notes: Sequence[Memory], *, zone: tzinfo) -> tuple[str, frozenset[int]]:
    """The notes as the flush reads them, one numbered, dated line each (as the prompt
    shows memories), within KNOWN_MAX_CHARS; and the numbers shown (only those may be
    named back)."""
    lines: list[str] = []
    shown: set[int] = set()
    spent = 0
    for memory in notes:
        line = memory_line(memory, zone=zone, width=NOTE_CHARS)
        if spent + len(line) + 1 > KNOWN_MAX_CHARS:
            break
        lines.append(line)
        shown.add(memory.pk)
        spent += len(line) + 1
    if not lines:
        return "", frozenset()
    head = "Notes already kept about the user (number · kind · date last said — text):"
    return "\n".join([head, *lines]), frozenset(shown)


def said_at(*, text: str, said: str | None, excerpt: Excerpt, user: User | None) -> datetime | None:
    """When the line a flushed note comes from was written: the line whose time the model
    gave (`said`, as the transcript writes it; the last line of that minute), or else the
    last line sharing the most of the note's key words (the person's own name is none), or
    else the excerpt's end."""
    stamps: dict[str, datetime] = {}
    for message in excerpt.messages:
        stamps[message.created_at.astimezone(UTC).strftime(STAMP)] = message.created_at
    if said is not None and (at := stamps.get(" ".join(said.replace("T", " ").split())[:16])) is not None:
        return at
    return _supporting_line(text, excerpt.messages, user) or excerpt.span.last_at


def _supporting_line(text: str, messages: Sequence[MessageRow], user: User | None) -> datetime | None:
    names = set(memory_terms(" ".join((user.first_name, user.last_name, user.username)))) if user else set()
    wanted = set(memory_terms(text)) - names
    best, when = 0, None
    for message in messages:
        shared = len(wanted & set(memory_terms(message.content or "")))
        if shared and shared >= best:  # the last of the lines sharing the most
            best, when = shared, message.created_at
    return when
