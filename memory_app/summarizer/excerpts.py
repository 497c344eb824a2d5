"""Which messages one summarizer run takes and how they read to the model. Apart from the
model call so that what leaves the prompt's window is decided (and sized) in one place.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC

from django.conf import settings

from qorven.llm import route_for
from qorven.llm.metered import estimate_tokens
from sessions_app.models import Message, Session
from sessions_app.quoting import framed_name
from sessions_app.selectors import MessageRow, StoredMessage, messages_read
from tenancy.models import Qor
from tenancy.trust import Trust, trust_allows

from ..digest import DigestSpan
from .model_answers import SUMMARY_INSTRUCTIONS

# One message's text in the transcript the summarizer reads (tool results: less).
LINE_MAX_CHARS, TOOL_LINE_MAX_CHARS = 2_000, 400
_READ_BATCH = 200


@dataclass(frozen=True)
class Excerpt:
    """A run of a session's messages: (after_seq, through_seq], visible ones only."""

    after_seq: int
    through_seq: int
    messages: list[MessageRow]
    span: DigestSpan

    @property
    def channels(self) -> list[str]:
        return sorted(self.span.channels)


def is_visible(message: StoredMessage) -> bool:
    """Whether a message is conversation (not a notice, a command or its answer, nor an
    answer the person had written again: regenerate keeps it, superseded, unsaid)."""
    meta = message.metadata if isinstance(message.metadata, dict) else {}
    return not (meta.get("notice") or meta.get("command") or meta.get("superseded"))


def excerpt_read(*, session: Session, after_seq: int, through_seq: int, budget: int) -> Excerpt:
    """The oldest messages after `after_seq` (up to `through_seq`) whose transcript fits
    `budget` tokens; at least one message, so a run always moves forward."""
    picked: list[MessageRow] = []
    spent = 0
    last = after_seq
    cursor = after_seq
    full = False
    while not full and cursor < through_seq:
        batch = messages_read(session=session, after_seq=cursor, limit=_READ_BATCH)
        if not batch:
            break
        for message in batch:
            if message.seq > through_seq:
                full = True
                break
            if is_visible(message):
                cost = estimate_tokens(transcript_line(message, session.qor.name))
                if picked and spent + cost > budget:
                    full = True
                    break
                picked.append(message)
                spent += cost
            last = message.seq
        cursor = batch[-1].seq
    span = DigestSpan(
        count=len(picked),
        channels=frozenset(m.channel for m in picked),
        first_at=min((m.created_at for m in picked), default=None),
        last_at=max((m.created_at for m in picked), default=None),
    )
    return Excerpt(after_seq=after_seq, through_seq=last, messages=picked, span=span)


# The most the memory flush reads of the person's notes already kept, where the summary
# reads the previous note (known_notes.KNOWN_MAX_CHARS, which is checked against this).
KNOWN_NOTES_MAX_CHARS = 2_400


def input_budget(qor: Qor, previous_note: str) -> int:
    """Tokens of transcript one summarizer call may take: the summary's call also reads
    the previous note, the flush's the person's notes already kept."""
    route = route_for(qor, "summarizer")
    overhead = (estimate_tokens(SUMMARY_INSTRUCTIONS) + 300
                + max(estimate_tokens(previous_note), KNOWN_NOTES_MAX_CHARS // 4 + 1))
    return max(route.num_ctx - settings.QORVEN_CONTEXT_RESERVE - overhead, 256)


def highest_trust(messages: Sequence[StoredMessage]) -> str | None:
    """The highest trust among the user messages of `messages` (None: none)."""
    levels = [message_trust(m) for m in messages if m.role == Message.Role.USER]
    return max(levels, key=lambda level: sum(trust_allows(level, other) for other in Trust.values)) if levels else None


def message_trust(message: StoredMessage) -> str:
    """The trust of the surface a message came from, as it was stored with it."""
    trust = (message.metadata or {}).get("trust") if isinstance(message.metadata, dict) else None
    return trust if trust in Trust.values else Trust.PAIRED


def transcript_line(message: StoredMessage, qor_name: str, *, top: str | None = None, sender: str | None = None) -> str:
    """One message as the summarizer reads it: when, where, who, and its text, clipped. A
    user line of less trust than `top` (the excerpt's highest) is marked, as in a turn's
    prompt: what it says is never the user's own lesson or task. `sender`: the name told
    apart from another sender's of the same name (sessions_app.quoting.sender_labels)."""
    when = message.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M")
    where = message.channel
    if message.role == Message.Role.USER and top is not None and message_trust(message) != top:
        where = f"{where} · lower trust"
    text = message.content or ""
    limit = LINE_MAX_CHARS
    if message.role == Message.Role.USER:
        who = message.sender_name or "user"
    elif message.role == Message.Role.ASSISTANT:
        who = message.sender_name or qor_name
        if message.tool_calls:
            names = ", ".join(str((c.get("function") or {}).get("name", "?")) for c in message.tool_calls)
            text = f"{text} [calls {names}]".strip()
    elif message.role == Message.Role.TOOL:
        who = f"tool {message.metadata.get('tool', '')}".strip()
        limit = TOOL_LINE_MAX_CHARS
    else:
        who = "system"
    # A sender's name is theirs: on one line, without brackets, it cannot start another line.
    return f"[{when} {where}] {sender or framed_name(who)}: {clip(' '.join(text.split()), limit)}"


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, an ellipsis where it was cut."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"

