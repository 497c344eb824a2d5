"""A person's own data in one tenant, exported as JSON Lines: what `qorven export`,
`GET /v1/export` and the chat page's "Download my data" give.

One JSON object a line, each with its `kind`, in this order:

- `export`: the header (format version, tenant, Qor or null for all, user, when, whether
  attachment data is included);
- `session`, then its `message`s in seq order (and after a message, with attachment data
  asked for, one `attachment` line per file it came with) — for each of the person's own
  sessions: canonical chats, active and archived, and their email, sms, voice, cron and
  legacy threads; never a group chat, which is everyone's in it;
- `memory`, `heartbeat` (the beats they made), `identity` (their accounts on the tenant's
  channels, paired to them);
- `end`: the counts, so a reader knows the file is whole.

What is left out on purpose: the Qor's tool calls and their results (its working, hidden
on every surface too), credentials and webhook secrets, the host's settings (models,
routes, prompts of config-owned beats), and whatever belongs to others (group chats, with
the new ids a platform gave them: a MovedThread is only ever a group chat's; other people's
memories, beats and identities). A message's metadata is passed through an
allowlist, so a key added later stays out until someone decides it is the person's.

Everything is read in chunks through the apps' selectors (keyset by id, messages by seq),
so the whole export is never in memory: a million-message conversation streams in a few
thousand queries, with memory flat. Those queries are one snapshot of the database
(qorven.runtime.read_snapshot): a message, session or memory written while the export is
read is in none of its lines, so its listing and its counts are one moment's, and no writer
waits for it.
"""
from __future__ import annotations

import json
from collections.abc import Generator, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from heartbeats_app.models import Heartbeat
from heartbeats_app.selectors import heartbeat_ids_of_person, heartbeats_of_person
from memory_app.models import Memory
from memory_app.selectors import memories_of_person
from qorven.runtime.read_snapshot import read_snapshot
from sessions_app.models import Message, Session
from sessions_app.selectors import (
    AttachmentRow,
    MessageRow,
    attachment_data,
    attachments_between,
    messages_read,
    sessions_of_person,
)
from tenancy.errors import NotFound
from tenancy.models import Qor, Tenant
from tenancy.selectors import membership_active, qor_get, tenant_get

from .models import Identity
from .selectors import identities_of_person

FORMAT = 1  # raised when a line changes in a way a reader of the old format would misread
CHUNK = 1000  # messages a query; sessions, memories, beats and identities are read in the same steps
# Attachment data read at once, by their sizes: up to QORVEN_MAX_UPLOAD each, so a chunk's
# worth could be gigabytes.
DATA_BATCH_BYTES = 16 * 1024 * 1024
BLOCK = 64 * 1024  # characters a write
# Message metadata that is the person's to see: how the message relates to others, what
# happened to it. Not the binding, the platform's address or sender id, the trust it was
# given, the model or route that wrote it (the host's), nor a key someone adds later.
MESSAGE_METADATA = frozenset({
    "reply_to", "notice", "command", "stopped", "cut_off", "withheld", "superseded", "heartbeat_name", "voice", "left_out",
    "left_out_why", "carried_from", "carried_to", "call",
})


@dataclass(frozen=True)
class ExportScope:
    tenant: Tenant
    user: User
    qor: Qor | None = None


def export_scope(*, tenant_slug: str, user: User, qor_slug: str | None = None) -> ExportScope:
    """Whose data and where, from the slugs asked for. A tenant the user is not a member of
    (now), or one the host has suspended, is the same NotFound as one that does not exist;
    a Qor of another tenant the same as a missing one. (The host's `qorven export` reads
    the membership itself.)"""
    try:
        tenant = tenant_get(slug=tenant_slug)
        if membership_active(tenant=tenant, user=user) is None:
            raise NotFound("not a member")
    except NotFound:
        raise NotFound(f"no tenant {tenant_slug!r}") from None
    return ExportScope(tenant, user, qor_get(tenant=tenant, slug=qor_slug) if qor_slug else None)


@dataclass
class ExportCounts:
    sessions: int = 0
    messages: int = 0
    attachments: int = 0
    memories: int = 0
    heartbeats: int = 0
    identities: int = 0


class PersonExport:
    """One person's export, as lines (each ending in a newline) read as they are written.
    `counts` says how much has been written so far; `progress`, when given, is called
    with it after every chunk (the command's progress bar)."""

    def __init__(self, *, tenant: Tenant, user: User, qor: Qor | None = None, attachments: bool = False,
                 progress: Any = None) -> None:
        self.tenant, self.user, self.qor, self.attachments = tenant, user, qor, attachments
        self.counts = ExportCounts()
        self._progress = progress
        self._own_beats: frozenset[int] | None = None  # read at the first heartbeat prompt met

    def lines(self) -> Generator[str, None, None]:
        """Every line, all read in one snapshot taken at the first (qorven.runtime.read_snapshot),
        so what is written meanwhile is in none of them. Read it to the end or close it, on
        the thread that began it: that ends the snapshot's transaction."""
        with read_snapshot():
            yield _line({"kind": "export", "format": FORMAT, "tenant": self.tenant.slug,
                         "qor": self.qor.slug if self.qor else None, "user": self.user.get_username(),
                         "exported_at": timezone.now().isoformat(), "attachments": self.attachments})
            yield from self._sessions()
            yield from self._memories()
            yield from self._heartbeats()
            yield from self._identities()
            yield _line({"kind": "end", **asdict(self.counts)})

    def _sessions(self) -> Iterator[str]:
        after = 0
        while sessions := sessions_of_person(tenant=self.tenant, user=self.user, qor=self.qor, after_id=after,
                                             limit=CHUNK):
            for session in sessions:
                self.counts.sessions += 1
                yield _line(_session(session))
                yield from self._messages(session)
            after = sessions[-1].pk
            if len(sessions) < CHUNK:
                return

    def _messages(self, session: Session) -> Iterator[str]:
        after = 0
        while True:
            # Not the tool calls and results: the same filter as every surface's read.
            rows = messages_read(session=session, after_seq=after, limit=CHUNK, without_working=True)
            if not rows:
                return
            shown = {row.seq for row in rows}
            attached: dict[int, list[AttachmentRow]] = {}
            for attachment in attachments_between(session=session, after_seq=after, through_seq=rows[-1].seq):
                if attachment.seq in shown:  # not a file a tool result carried
                    attached.setdefault(attachment.seq, []).append(attachment)
            data = self._data_reader([a for found in attached.values() for a in found])
            for row in rows:
                if self._others_prompt(row):
                    continue
                self.counts.messages += 1
                files = attached.get(row.seq, [])
                yield _line(_message(row, session, files))
                for index, attachment in enumerate(files):
                    self.counts.attachments += 1
                    if data is not None:
                        yield _line({"kind": "attachment", "session": session.pk, "seq": row.seq, "index": index,
                                     "mime_type": attachment.mime_type, "name": attachment.name,
                                     "size": attachment.size, "data": data(attachment.id)})
            if self._progress is not None:
                self._progress(self.counts)
            if len(rows) < CHUNK:
                return
            after = rows[-1].seq

    def _others_prompt(self, row: MessageRow) -> bool:
        """Whether `row` is the prompt a heartbeat ran on that the person did not make: a
        config-owned beat's (the host's) or another member's, delivering to them. Their
        run is the person's session, and its answer is theirs; the prompt is not."""
        beat = row.metadata.get("heartbeat") if isinstance(row.metadata, dict) else None
        if beat is None or row.role != Message.Role.USER:
            return False
        if self._own_beats is None:
            self._own_beats = heartbeat_ids_of_person(tenant=self.tenant, user=self.user)
        return beat not in self._own_beats

    def _data_reader(self, attachments: list[AttachmentRow]) -> Any:
        """None without attachment data; else a function giving one attachment's data, read
        in batches of at most DATA_BATCH_BYTES (in the order the export asks for them) and
        let go of once given."""
        if not self.attachments:
            return None
        batches: list[list[int]] = []
        size = 0
        for attachment in attachments:
            if not batches or size + attachment.size > DATA_BATCH_BYTES:
                batches.append([])
                size = 0
            batches[-1].append(attachment.id)
            size += attachment.size
        held: dict[int, str] = {}

        def data(image_id: int) -> str | None:
            while image_id not in held and batches:
                held.update(attachment_data(tenant=self.tenant, ids=batches.pop(0)))
            return held.pop(image_id, None)  # None: emptied by the retention beat meanwhile

        return data

    def _memories(self) -> Iterator[str]:
        for memory in self._chunked(memories_of_person, qor=self.qor):
            self.counts.memories += 1
            yield _line(_memory(memory))

    def _heartbeats(self) -> Iterator[str]:
        for beat in self._chunked(heartbeats_of_person, qor=self.qor):
            self.counts.heartbeats += 1
            yield _line(_heartbeat(beat, self.user))

    def _identities(self) -> Iterator[str]:
        # A channel identity is the tenant's (it speaks to every Qor there): kept with one Qor's too.
        for identity in self._chunked(identities_of_person):
            self.counts.identities += 1
            yield _line(_identity(identity))

    def _chunked(self, read: Any, **scope: Any) -> Iterator[Any]:
        after = 0
        while rows := read(tenant=self.tenant, user=self.user, after_id=after, limit=CHUNK, **scope):
            yield from rows
            if len(rows) < CHUNK:
                return
            after = rows[-1].pk


def _session(session: Session) -> dict[str, Any]:
    return {"kind": "session", "id": session.pk, "qor": session.qor.slug, "session_kind": session.kind,
            "state": session.state, "channel": session.channel or None,
            "thread": session.external_thread_id or None,
            "started_at": _when(session.started_at), "ended_at": _when(session.ended_at)}


def _message(row: MessageRow, session: Session, files: list[AttachmentRow]) -> dict[str, Any]:
    metadata = row.metadata if isinstance(row.metadata, dict) else {}
    return {"kind": "message", "session": session.pk, "seq": row.seq, "role": row.role, "content": row.content,
            "channel": row.channel, "sender_name": row.sender_name, "created_at": _when(row.created_at),
            "answer_state": row.answer_state,
            "metadata": {key: value for key, value in metadata.items() if key in MESSAGE_METADATA},
            "attachments": [{"index": i, "mime_type": a.mime_type, "size": a.size, "name": a.name,
                             "reading": a.reading, "text": a.text} for i, a in enumerate(files)]}


def _memory(memory: Memory) -> dict[str, Any]:
    return {"kind": "memory", "id": memory.pk, "qor": memory.qor.slug, "type": memory.type,
            "content": memory.content, "channels": memory.channels or [],
            "period_start": _when(memory.period_start), "period_end": _when(memory.period_end),
            "source_session": memory.source_session_id, "created_at": _when(memory.created_at),
            "updated_at": _when(memory.updated_at)}


def _heartbeat(beat: Heartbeat, user: User) -> dict[str, Any]:
    # Whom a beat delivers to is named only when it is the person: another member's name
    # is theirs, not part of this export.
    delivery = ({"channel": beat.deliver_channel or None, "to_you": beat.deliver_to_id == user.pk}
                if beat.deliver_to_id or beat.deliver_channel else None)
    return {"kind": "heartbeat", "id": beat.pk, "qor": beat.qor.slug, "name": beat.name, "cron": beat.cron,
            "timezone": beat.timezone or None, "prompt": beat.prompt, "enabled": beat.enabled,
            "delivery": delivery, "last_run_at": _when(beat.last_run_at), "last_status": beat.last_status,
            "created_at": _when(beat.created_at)}


def _identity(identity: Identity) -> dict[str, Any]:
    return {"kind": "identity", "channel": identity.channel, "external_id": identity.external_id,
            "display_name": identity.display_name, "trust": identity.trust_level, "approval": identity.approval,
            "created_at": _when(identity.created_at)}


def _when(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _line(record: dict[str, Any]) -> str:
    # Not ASCII-escaped (Arabic stays Arabic), but U+2028, U+2029 and U+0085 are: JSON
    # allows them raw in strings, and a reader splitting lines as Python's splitlines() or
    # JavaScript's line handling does would cut a record there.
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    if "\u2028" in text or "\u2029" in text or "\x85" in text:
        text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").replace("\x85", "\\u0085")
    return text + "\n"


def export_blocks(lines: Generator[str, None, None]) -> Generator[str, None, None]:
    """The lines joined into blocks of about BLOCK characters: what a response or a file is
    written in, a few thousand writes for a large export rather than one a message. Closed,
    it closes `lines` (the export's snapshot ends)."""
    size = BLOCK
    block: list[str] = []
    held = 0
    try:
        for line in lines:
            block.append(line)
            held += len(line)
            if held >= size:
                yield "".join(block)
                block, held = [], 0
        if block:
            yield "".join(block)
    finally:
        lines.close()
