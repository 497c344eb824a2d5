"""One excerpt condensed: the memory flush and the summary turned into what compaction
stores (memories, with reminders' due times; the digest; the running note), by the model
or, with the offline provider, by plain extracts. Apart from the model call so that
what is kept, and how long it may be, reads in one place.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import NamedTuple

from django.utils import timezone

from qorven.llm import route_for
from qorven.runtime.storable_text import storable
from sessions_app.models import Message, Session
from sessions_app.quoting import sender_labels
from sessions_app.selectors import MessageRow

from tenancy.selectors import membership_active
from tenancy.trust import Trust, role_trust, trust_allows
from tenancy.zones import person_zone

from ..digest import DIGEST_MAX_CHARS, digest_plain_extract
from ..models import Memory
from ..reminders import DueError, due_parse
from ..selectors import memories_related
from ..services import memory_normalize
from .excerpts import Excerpt, clip, highest_trust, message_trust, transcript_line
from .known_notes import known_block, known_notes, said_at
from .model_answers import (
    FLUSH_INSTRUCTIONS,
    GROUP_CHAT,
    KNOWN_NOTES,
    LOWER_TRUST,
    SUMMARY_INSTRUCTIONS,
    DatedItem,
    FlushResult,
    NoteItem,
    SummaryResult,
    ask,
)

# The name the summarizer has always logged under.
logger = logging.getLogger("memory_app.summarizer")

# The running note stays about this long, so the prompt's fixed part stays small.
NOTE_MAX_CHARS = 2_400
# Items the offline extract may keep from one run.
OFFLINE_MAX_ITEMS = 20


class FlushedMemory(NamedTuple):
    """One memory the flush found; `due` is when a reminder comes due (None: undated);
    `said_at`, when the line it came from was written (None: the excerpt's end);
    `replaces`, the person's notes it corrects; `known`, the note of theirs that already
    says it (then it is not stored: that one is said again)."""

    type: str
    content: str
    due: datetime | None = None
    said_at: datetime | None = None
    replaces: tuple[int, ...] = ()
    known: int | None = None


@dataclass
class Condensed:
    excerpt: Excerpt
    note: str
    digest: str  # the conversation_digest memory's text: header, then the summary
    memories: list[FlushedMemory] = field(default_factory=list)
    # The person's notes the flush was shown: the only ones it may say are known or replaced.
    shown: frozenset[int] = frozenset()



def condense(*, session: Session, excerpt: Excerpt, previous_note: str) -> Condensed:
    """Flush and summarize one excerpt. Raises CompactionFailed."""
    qor = session.qor
    route = route_for(qor, "summarizer")
    group = session.kind == Session.Kind.GROUP
    header = digest_plain_extract([], span=excerpt.span, group=group)
    if route.offline:
        extract = digest_plain_extract(excerpt.messages, group=group)
        note = _clip_tail("\n".join(p for p in (previous_note.strip(), extract) if p), NOTE_MAX_CHARS)
        found, shown = _offline_settled(session, offline_flush(excerpt.messages, own=_own_trust(session, excerpt)))
        return Condensed(excerpt, note=note, digest=extract, memories=found, shown=shown)
    top = highest_trust(excerpt.messages)
    labels = sender_labels(excerpt.messages)  # two senders of one name, told apart
    transcript = "\n".join(transcript_line(m, qor.name, top=top, sender=labels.get(m.pk)) for m in excerpt.messages)
    marked = LOWER_TRUST if " · lower trust] " in transcript else ""
    zone, now = person_zone(tenant=session.tenant, user_id=session.user_id), timezone.now()
    known, shown = known_block(known_notes(session=session, excerpt=excerpt), zone=zone)
    flush = ask(
        session, FlushResult,
        FLUSH_INSTRUCTIONS.format(zone=_zone_label(zone, now), schema=json.dumps(FlushResult.model_json_schema()))
        + (KNOWN_NOTES if known else "") + (GROUP_CHAT if group else "") + marked,
        (f"{known}\n\n" if known else "") + f"Conversation excerpt (oldest first):\n{transcript}",
        step="memory flush",
    )
    summary = ask(
        session, SummaryResult,
        SUMMARY_INSTRUCTIONS.format(qor=qor.name, schema=json.dumps(SummaryResult.model_json_schema()))
        + (GROUP_CHAT if group else "") + marked,
        f"Previous summary:\n{previous_note.strip() or '(none)'}\n\n"
        f"Conversation excerpt (oldest first):\n{transcript}",
        step="summary",
    )
    memories = [_flushed(Memory.Type.FACT, f, session, excerpt) for f in flush.facts]
    memories += [_flushed(Memory.Type.LESSON, lesson, session, excerpt) for lesson in flush.lessons]
    for item in flush.reminders:
        memories.append(_flushed(Memory.Type.REMINDER, item, session, excerpt, due=_due(item, zone, now)))
    for item in flush.open_tasks:
        memories.append(_flushed(Memory.Type.REMINDER, item, session, excerpt, due=_due(item, zone, now),
                                 text=_open_task(_text(item))))
    # A note that is no text once stored (NUL alone) is nothing to keep, not a failed flush.
    memories = [m for m in memories if storable(m.content).strip()]
    digest = clip(f"{header}\n{summary.digest}", DIGEST_MAX_CHARS)
    return Condensed(excerpt, note=clip(summary.note, NOTE_MAX_CHARS), digest=digest, memories=memories,
                     shown=shown)


def _flushed(kind: str, item: str | NoteItem, session: Session, excerpt: Excerpt, *, due: datetime | None = None,
             text: str | None = None) -> FlushedMemory:
    """One item of the flush's answer, dated by the line it came from."""
    note = item if isinstance(item, NoteItem) else None
    when = said_at(text=_text(item), said=note.said if note else None, excerpt=excerpt, user=session.user)
    return FlushedMemory(kind, text or _text(item), due, when, tuple(note.replaces) if note else (),
                         note.known if note else None)


def _open_task(text: str) -> str:
    return text if text.lower().startswith("open task") else f"Open task: {text}"


def _text(item: str | NoteItem) -> str:
    return item if isinstance(item, str) else item.text


def _due(item: str | NoteItem, zone: tzinfo, now: datetime) -> datetime | None:
    """When a flushed reminder comes due. None (undated) when no time was given, when it
    cannot be read, or when it has already passed: by the time a conversation is condensed,
    a time gone by was dealt with in it (or the `remember` tool already scheduled it), and
    bringing it up again later would only repeat it."""
    if not isinstance(item, DatedItem) or item.due is None:
        return None
    try:
        due = due_parse(item.due, zone=zone)
    except DueError as exc:
        logger.info("memory flush: keeping a reminder undated: %s", exc)
        return None
    return due if due > now else None


def _zone_label(zone: tzinfo, now: datetime) -> str:
    offset = now.astimezone(zone).strftime("%z")
    return f"{getattr(zone, 'key', zone)}, now UTC{offset[:3]}:{offset[3:]}"


def _clip_tail(text: str, limit: int) -> str:
    """Keep the end (the newest part) of a growing plain-extract note."""
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-(limit - 1) :].lstrip()


# --- the offline extract ------------------------------------------------------------------

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_REMINDER = re.compile(
    r"\b(remind me|reminder|don'?t forget|do not forget|to-?do|deadline|due (?:on|by)|appointment)\b", re.I
)
_FACT = re.compile(
    r"\b(remember|my \w+(?: \w+)? (?:is|are|was)|i am|i'm|i live|i work|i have|i like|i love|i prefer|i hate"
    r"|i don'?t like|call me|i was born)\b",
    re.I,
)


def _own_trust(session: Session, excerpt: Excerpt) -> str:
    """The trust of the person's own lines: what their role earns in the tenant (the owner's
    web page: owner), or, when the conversation has no one person or they are a member no
    more, the highest of the excerpt's lines. Never public: an anonymous line is no one's."""
    levels = [highest_trust(excerpt.messages) or Trust.PUBLIC]
    if session.user is not None and (membership := membership_active(tenant=session.tenant,
                                                                     user=session.user)) is not None:
        levels.append(role_trust(membership.role))
    top = max(levels, key=lambda level: sum(trust_allows(level, other) for other in Trust.values))
    return top if top != Trust.PUBLIC else Trust.PAIRED


def offline_flush(messages: list[MessageRow], *, own: str = Trust.PAIRED) -> list[FlushedMemory]:
    """The memory flush without a model: the user's sentences (not questions) that state
    a fact about themselves or ask to be reminded, kept verbatim with who said them, where
    and when. A reminder only from a line of the person's `own` trust: one from a surface
    of less (an embed's visitor, a group's stranger) is what was said there, never the
    person's own reminder, as the summarizer model is told (LOWER_TRUST)."""
    found: list[FlushedMemory] = []
    for message in messages:
        if message.role != Message.Role.USER:
            continue
        theirs = trust_allows(message_trust(message), own)
        for sentence in _SENTENCE.findall(message.content or ""):
            sentence = " ".join(sentence.split())
            if len(sentence) < 8 or sentence.endswith("?"):
                continue  # a question states nothing to keep
            kind = (
                (Memory.Type.REMINDER if theirs else None) if _REMINDER.search(sentence)
                else Memory.Type.FACT if _FACT.search(sentence) else None
            )
            if kind is None:
                continue
            when = message.created_at.astimezone(UTC).strftime("%Y-%m-%d")
            who = message.sender_name or "The user"
            found.append(FlushedMemory(kind, clip(f"{who} said on {message.channel} ({when}): {sentence}", 1_000),
                                       said_at=message.created_at))
            if len(found) >= OFFLINE_MAX_ITEMS:
                return found
    return found


# How offline_flush opens a note: who said it, where and when.
_OFFLINE_SAID = re.compile(r"^[^\n]{1,200}? said on [\w-]+ \(\d{4}-\d{2}-\d{2}\): ")


def _sentence_key(text: str) -> str:
    """What a note says, compared as memories are (normalised), without offline_flush's
    opening or the sentence's last stop."""
    return memory_normalize(_OFFLINE_SAID.sub("", text, count=1)).rstrip(" .!")


def _offline_settled(session: Session, found: list[FlushedMemory]) -> tuple[list[FlushedMemory], frozenset[int]]:
    """The offline extract without a sentence already kept: one said twice in the run is
    kept once, from its later line; one the person has a note of (the same words,
    normalised) is that note said again, or, when that note is an earlier extract of the
    same kind, the newer extract (dated in its text) in its place. Returns the notes and
    the ids of the person's notes they name."""
    latest: dict[str, FlushedMemory] = {}
    for memory in found:
        latest.pop(key := _sentence_key(memory.content), None)
        latest[key] = memory
    if session.user is None:
        return list(latest.values()), frozenset()
    settled: list[FlushedMemory] = []
    shown: set[int] = set()
    for key, memory in latest.items():
        related = memories_related(tenant=session.tenant, qor=session.qor, user=session.user, content=key, limit=5)
        same = next((m for m in related if _sentence_key(m.content) == key), None)
        if same is None:
            settled.append(memory)
            continue
        shown.add(same.pk)
        newer = memory.said_at is not None and same.said_at <= memory.said_at
        if same.type == memory.type and _OFFLINE_SAID.match(same.content) and newer:
            settled.append(memory._replace(replaces=(same.pk,)))
        else:
            settled.append(memory._replace(known=same.pk))
    return settled, frozenset(shown)
