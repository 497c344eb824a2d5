"""The summarizer sub-agent: condense a run of messages before it leaves the prompt.

Two steps, both on the Qor's `summarizer` model route:

1. the **memory flush** extracts the facts, reminders and open tasks of the run into
   memories, as JSON validated against a strict schema (one repair attempt; a flush that
   still fails raises CompactionFailed, so nothing is compacted and nothing is lost); a
   reminder or open task may carry a due time, read like the `remember` tool's (a due
   time that cannot be read, or has already passed, leaves it undated: never a failure);
2. the **summary** gives a digest of the run (stored as a `conversation_digest` memory
   with its date range and channels) and the updated running note the prompt carries.

With the offline provider (no model configured) both are plain extracts, no model call.
This module only reads and computes; memory_app.compaction stores the results.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Annotated, Any, NamedTuple

from django.conf import settings
from django.utils import timezone
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)

from qorven.llm import Completion, ModelError, provider_for_role, route_for
from qorven.llm.metered import Spend, estimate_tokens, model_call
from sessions_app.models import Message, Session
from sessions_app.selectors import MessageRow, StoredMessage, messages_read
from tenancy.models import Qor

from .digest import DigestSpan, digest_plain_extract
from .models import Memory
from .reminders import DueError, due_parse, tenant_zone

logger = logging.getLogger(__name__)

# The running note stays about this long, so the prompt's fixed part stays small.
NOTE_MAX_CHARS = 2_400
DIGEST_MAX_CHARS = 1_500
# One message's text in the transcript the summarizer reads (tool results: less).
LINE_MAX_CHARS, TOOL_LINE_MAX_CHARS = 2_000, 400
# Items the offline extract may keep from one run.
OFFLINE_MAX_ITEMS = 20
_READ_BATCH = 200

Item = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1_000)]
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class CompactionFailed(Exception):
    """The run could not be condensed (model down, invalid answer, session changed).
    Nothing was stored; the messages stay in the prompt's reach and are retried later.
    `reason` is ours and safe to show a person; the exception's text (for the log) may
    carry the provider's words."""

    def __init__(self, detail: str, *, reason: str = "") -> None:
        super().__init__(detail)
        self.reason = reason or detail


class DatedItem(BaseModel):
    """A reminder or open task with the time it comes due."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: Item
    due: str | None = Field(
        default=None,
        description="ISO 8601: 2026-03-14T15:30 (the user's local time) or 2026-03-14 (no time of day stated)",
    )

    @field_validator("due", mode="before")
    @classmethod
    def _any_due(cls, value: object) -> object:
        # A due time the model wrote wrongly must not fail the flush: it is read (or
        # dropped) after validation, and the item kept either way.
        return value if isinstance(value, str) else None


class FlushResult(BaseModel):
    """What the memory flush must answer: every key present, nothing else."""

    model_config = ConfigDict(extra="forbid", strict=True)

    facts: list[Item] = Field(max_length=50, description="durable facts about the user and their world")
    reminders: list[Item | DatedItem] = Field(
        max_length=50, description="things to remind the user of, with dates as stated, and when they are due"
    )
    open_tasks: list[Item | DatedItem] = Field(
        max_length=50, description="tasks committed to and not done yet, and when they are due"
    )
    # Optional, so an answer of a model that leaves it out still counts.
    lessons: list[Item] = Field(
        default_factory=list, max_length=50,
        description="what the user corrected or taught the assistant: how they want things done",
    )


class SummaryResult(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    digest: Text = Field(description="a summary of just this excerpt")
    note: Text = Field(description="the updated running summary of the whole conversation so far")


FLUSH_INSTRUCTIONS = """\
You are the memory keeper of a personal assistant. Part of a conversation is about to be \
condensed; save first what must not be forgotten. From the conversation excerpt, extract:
- facts: durable facts about the user and their world (preferences, people, places, \
accounts, plans, decisions);
- reminders: what the user asked to be reminded of, with dates and times as stated;
- open_tasks: tasks the user or the assistant committed to that are not done yet;
- lessons: what the user corrected or taught the assistant (how they want things done, \
a mistake not to repeat).
Write each item as one self-contained sentence that names the user. Use [] when there are \
none. Never invent anything that is not in the excerpt.
A reminder or open task that has a time (when to remind the user, a deadline) is an object \
{{"text": "the sentence", "due": "the time"}} with the time in ISO 8601: 2026-03-14T15:30 in \
the user's local time ({zone}), or just the date, 2026-03-14, when no time of day was \
stated. Work relative times ("tomorrow", "in two hours") out from the time of the message \
that states them (message times are UTC). Without a time, give the plain sentence.
Reply with one JSON object and nothing else, matching this JSON Schema:
{schema}"""

SUMMARY_INSTRUCTIONS = """\
You condense part of a conversation between a user and their assistant {qor} so the \
conversation can go on without those messages. Lines are tagged with their time (UTC) and \
the surface (channel) they came from.
Reply with one JSON object and nothing else, matching this JSON Schema:
{schema}
- "digest": this excerpt alone in at most 120 words: topics, decisions, answers given.
- "note": the running summary of the whole conversation so far, merging the previous \
summary with this excerpt, in at most 250 words, the most recent and important first."""

# Added to both instructions for a group chat's excerpt: its digest is kept in the memory
# of each member who spoke, and must not pass one person's words off as another's.
GROUP_CHAT = """
This excerpt is from a group chat: several people write in it, each line naming who. \
There is no single user: say who said, asked or decided what, by name."""


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


class FlushedMemory(NamedTuple):
    """One memory the flush found; `due` is when a reminder comes due (None: undated)."""

    type: str
    content: str
    due: datetime | None = None


@dataclass
class Condensed:
    excerpt: Excerpt
    note: str
    digest: str  # the conversation_digest memory's text: header, then the summary
    memories: list[FlushedMemory] = field(default_factory=list)


def is_visible(message: StoredMessage) -> bool:
    """Whether a message is conversation (not a notice, a command or its answer)."""
    meta = message.metadata if isinstance(message.metadata, dict) else {}
    return not (meta.get("notice") or meta.get("command"))


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
                cost = estimate_tokens(_line(message, session.qor.name))
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


def input_budget(qor: Qor, previous_note: str) -> int:
    """Tokens of transcript one summarizer call may take."""
    route = route_for(qor, "summarizer")
    overhead = estimate_tokens(SUMMARY_INSTRUCTIONS) + 300 + estimate_tokens(previous_note)
    return max(route.num_ctx - settings.QORVEN_CONTEXT_RESERVE - overhead, 256)


def condense(*, session: Session, excerpt: Excerpt, previous_note: str) -> Condensed:
    """Flush and summarize one excerpt. Raises CompactionFailed."""
    qor = session.qor
    route = route_for(qor, "summarizer")
    group = session.kind == Session.Kind.GROUP
    header = digest_plain_extract([], span=excerpt.span, group=group)
    if route.offline:
        extract = digest_plain_extract(excerpt.messages, group=group)
        note = _clip_tail("\n".join(p for p in (previous_note.strip(), extract) if p), NOTE_MAX_CHARS)
        return Condensed(excerpt, note=note, digest=extract, memories=offline_flush(excerpt.messages))
    transcript = "\n".join(_line(m, qor.name) for m in excerpt.messages)
    zone, now = tenant_zone(session.tenant), timezone.now()
    flush = _ask(
        session, FlushResult,
        FLUSH_INSTRUCTIONS.format(zone=_zone_label(zone, now), schema=json.dumps(FlushResult.model_json_schema()))
        + (GROUP_CHAT if group else ""),
        f"Conversation excerpt (oldest first):\n{transcript}",
        step="memory flush",
    )
    summary = _ask(
        session, SummaryResult,
        SUMMARY_INSTRUCTIONS.format(qor=qor.name, schema=json.dumps(SummaryResult.model_json_schema()))
        + (GROUP_CHAT if group else ""),
        f"Previous summary:\n{previous_note.strip() or '(none)'}\n\n"
        f"Conversation excerpt (oldest first):\n{transcript}",
        step="summary",
    )
    memories = [FlushedMemory(Memory.Type.FACT, f) for f in flush.facts]
    memories += [FlushedMemory(Memory.Type.LESSON, lesson) for lesson in flush.lessons]
    for item in flush.reminders:
        memories.append(FlushedMemory(Memory.Type.REMINDER, _text(item), _due(item, zone, now)))
    for item in flush.open_tasks:
        memories.append(FlushedMemory(Memory.Type.REMINDER, _open_task(_text(item)), _due(item, zone, now)))
    digest = _clip(f"{header}\n{summary.digest}", DIGEST_MAX_CHARS)
    return Condensed(excerpt, note=_clip(summary.note, NOTE_MAX_CHARS), digest=digest, memories=memories)


def _open_task(text: str) -> str:
    return text if text.lower().startswith("open task") else f"Open task: {text}"


def _text(item: str | DatedItem) -> str:
    return item if isinstance(item, str) else item.text


def _due(item: str | DatedItem, zone: tzinfo, now: datetime) -> datetime | None:
    """When a flushed reminder comes due. None (undated) when no time was given, when it
    cannot be read, or when it has already passed: by the time a conversation is condensed,
    a time gone by was dealt with in it (or the `remember` tool already scheduled it), and
    bringing it up again later would only repeat it."""
    if isinstance(item, str) or item.due is None:
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


def _ask(session: Session, schema: type[BaseModel], instructions: str, content: str, *, step: str) -> Any:
    """One JSON answer from the summarizer route, validated; one repair attempt."""
    provider = provider_for_role(session.qor, "summarizer")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": instructions},
        {"role": "user", "content": content},
    ]
    problem = ""
    for _attempt in range(2):
        completion = _complete(session, provider, messages)
        try:
            return schema.model_validate(_json_object(completion.content))
        except (ValueError, ValidationError) as exc:
            problem = _describe(exc)
            logger.info("summarizer %s for session %s was invalid: %s", step, session.pk, problem)
            messages += [
                {"role": "assistant", "content": completion.content},
                {"role": "user", "content": f"That was not valid ({problem}). Reply with only the JSON object."},
            ]
    raise CompactionFailed(f"the {step} did not return valid JSON ({problem})",
                           reason=f"the model's {step} was not in the form asked for")


def _complete(session: Session, provider: Any, messages: list[dict[str, Any]]) -> Completion:
    try:
        return model_call(provider=provider, messages=messages, spend=Spend(session.tenant, session.qor, "summarizer"))
    except ModelError as exc:
        reason = ("the summarizer model isn't answering" if exc.transient
                  else "the summarizer model refused the request")
        raise CompactionFailed(f"the summarizer model could not answer: {exc.kind}: {exc.detail}",
                               reason=reason) from exc


_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.IGNORECASE)


def _json_object(text: str) -> Any:
    """The JSON object in a model's answer, tolerating a code fence or words around it."""
    text = _FENCE.sub("", text.strip())
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in the answer")
    try:
        return json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg}") from None


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "answer"
        return f"{where}: {first['msg']}"[:200]
    return str(exc)[:200]


def _line(message: StoredMessage, qor_name: str) -> str:
    when = message.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M")
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
    return f"[{when} {message.channel}] {who}: {_clip(' '.join(text.split()), limit)}"


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


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


def offline_flush(messages: list[MessageRow]) -> list[FlushedMemory]:
    """The memory flush without a model: the user's sentences (not questions) that state
    a fact about themselves or ask to be reminded, kept verbatim with who said them, where
    and when."""
    found: list[FlushedMemory] = []
    for message in messages:
        if message.role != Message.Role.USER:
            continue
        for sentence in _SENTENCE.findall(message.content or ""):
            sentence = " ".join(sentence.split())
            if len(sentence) < 8 or sentence.endswith("?"):
                continue  # a question states nothing to keep
            kind = (
                Memory.Type.REMINDER if _REMINDER.search(sentence)
                else Memory.Type.FACT if _FACT.search(sentence) else None
            )
            if kind is None:
                continue
            when = message.created_at.astimezone(UTC).strftime("%Y-%m-%d")
            who = message.sender_name or "The user"
            found.append(FlushedMemory(kind, _clip(f"{who} said on {message.channel} ({when}): {sentence}", 1_000)))
            if len(found) >= OFFLINE_MAX_ITEMS:
                return found
    return found
