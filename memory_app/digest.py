"""Conversation digests: the text a `conversation_digest` memory holds for a run of messages.

`digest_plain_extract` needs no model: date range, channels, message count and the first
lines the user wrote, bounded in length. `digest_summarize` is the entry point callers use;
it will route to the Qor's summarizer model once the LLM layer is wired in, and falls back
to the plain extract.

Both take any iterable of messages (model instances, `DigestMessage` tuples or dicts with
role, content, channel and created_at) and consume it once, keeping only counters and the
bounded excerpt: a session of a million messages can be streamed through in flat memory.
A caller that already knows the count, channels and period (from an aggregate query) can
pass them as `span` and give only the opening messages as a sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from tenancy.models import Qor

# The whole digest stays below this, so a digest is a cheap memory to retrieve.
DIGEST_MAX_CHARS = 1_500
# One user message contributes at most its first line, cut to this length.
LINE_MAX_CHARS = 160


class DigestMessage(NamedTuple):
    role: str
    content: str
    channel: str
    created_at: datetime


@dataclass(frozen=True)
class DigestSpan:
    """What a whole run of messages covers, when the digest is given only a sample of it."""

    count: int
    channels: frozenset[str]
    first_at: datetime | None
    last_at: datetime | None


def _field(message: Any, name: str) -> Any:
    if isinstance(message, Mapping):
        return message.get(name)
    return getattr(message, name)


def _first_line(content: str) -> str:
    for line in content.splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= LINE_MAX_CHARS else line[: LINE_MAX_CHARS - 1] + "…"
    return ""


def _sender(message: Any) -> str:
    name = message.get("sender_name") if isinstance(message, Mapping) else getattr(message, "sender_name", "")
    return " ".join(str(name or "").split()) or "someone"


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def digest_plain_extract(messages: Iterable[Any], *, span: DigestSpan | None = None, group: bool = False) -> str:
    """A short plain-text digest: period (UTC), channels, count, first lines from the user.

    At most DIGEST_MAX_CHARS characters; empty for no messages. With `span`, the header
    describes it and `messages` only feeds the excerpt (a sample, e.g. the first ones).
    `group`: the messages are a group chat's, where several people write; it says so, and
    each line names who wrote it (the digest is kept in each member's own memory, where
    another's words must not read as theirs).
    """
    count = 0
    channels: set[str] = set()
    first_at: datetime | None = None
    last_at: datetime | None = None
    lines: list[str] = []
    budget = DIGEST_MAX_CHARS - 200  # room for the header
    for message in messages:
        if span is not None and budget <= 0:
            break  # the excerpt is full and the header is known: the rest changes nothing
        count += 1
        if span is None:
            if channel := _field(message, "channel"):
                channels.add(channel)
            if (created_at := _field(message, "created_at")) is not None:
                first_at = created_at if first_at is None or created_at < first_at else first_at
                last_at = created_at if last_at is None or created_at > last_at else last_at
        if budget > 0 and _field(message, "role") == "user":
            line = _first_line(_field(message, "content") or "")
            if line:
                entry = f"- {_sender(message)}: {line}" if group else f"- {line}"
                if len(entry) + 1 <= budget:
                    lines.append(entry)
                budget -= len(entry) + 1
    cut = budget < 0
    if span is not None:
        cut = cut or span.count > count
        count, channels, first_at, last_at = (
            span.count,
            set(span.channels),
            span.first_at,
            span.last_at,
        )
    if count == 0:
        return ""
    period = ""
    if first_at is not None and last_at is not None:
        start, end = _stamp(first_at), _stamp(last_at)
        period = f" on {start} UTC" if start == end else f" from {start} to {end} UTC"
    where = ", ".join(sorted(channels)) or "no channel"
    noun = "message" if count == 1 else "messages"
    header = f"{'Group chat' if group else 'Conversation'} on {where}{period} ({count} {noun})."
    if not lines:
        return header
    if cut:
        lines.append("- …")
    intro = [] if group else ["The user wrote:"]  # a group's lines name their writers
    return "\n".join([header, *intro, *lines])


def digest_summarize(*, qor: Qor, messages: Iterable[Any], span: DigestSpan | None = None) -> str:
    """The digest text of `messages` (or of `span`, sampled by `messages`) for `qor`'s memory.

    For now the plain extract; the summarizer model route of `qor` takes over here once the
    LLM layer lands (keeping the plain extract as the fallback when no model answers).
    """
    return digest_plain_extract(messages, span=span)
