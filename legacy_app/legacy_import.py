"""Import a per-channel install's export (JSON lines) into legacy sessions.

One JSON object per line, one message each::

    {"tenant": "acme", "qor": "aria", "user": "alice", "session": "<opaque key>",
     "role": "user", "content": "hi", "channel": "telegram",
     "created_at": "2024-05-01T09:30:00+00:00", "sender_name": "Alice"}

Lines with the same (tenant, qor, channel, session) form one legacy session (kind
"legacy", external_thread_id = the key), owned by `user`, who is created (without a usable
password) and made a member of the tenant when missing. Messages keep their created_at; a
timestamp without an offset is read in the tenant's timezone. Keys the format does not
know are kept in the message's metadata under "legacy", with the session key.

A bad line (invalid JSON or UTF-8, a missing or mistyped field, an unknown tenant or Qor,
a bad role, channel or date, a session key owned by another user) is reported with its
line number and skipped; it never leaves anything half-written. Importing the same file
again stores nothing twice: each message carries an external id derived from its content
(scope "legacy-import", unique per tenant in the database), and lines whose id is stored
are skipped before any session is created, so a re-import after collapse-sessions does not
revive empty sessions. Messages are written in bulk, a block of seqs reserved per session
under its row lock (as `message_append` does for one), so they are not broadcast or
delivered anywhere; they also count as answered (the agent does not reply to history).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from qorven.runtime.json_errors import json_problem
from sessions_app.channel_kinds import Channel
from sessions_app.errors import SessionClosed
from sessions_app.models import Message, Session
from sessions_app.services.answers import session_mark_replied
from tenancy.models import Membership, Qor, Tenant

IMPORT_SCOPE = "legacy-import"
BATCH_LINES = 1_000  # lines per transaction
ATTEMPTS = 3  # tries of a batch that collides with a concurrent writer
KEPT_PROBLEMS = 1_000
REQUIRED = ("tenant", "qor", "user", "session", "role", "content", "channel", "created_at")
KNOWN = frozenset(REQUIRED) | {"sender_name"}
SENDER_MAX = Message._meta.get_field("sender_name").max_length or 200
THREAD_MAX = Session._meta.get_field("external_thread_id").max_length or 255


class BadLine(ValueError):
    """Why one line of the export cannot be imported."""


@dataclass(frozen=True)
class ImportProblem:
    line: int
    reason: str


@dataclass
class ImportSummary:
    lines: int = 0  # non-blank lines read
    imported: int = 0
    already_present: int = 0
    skipped: int = 0
    sessions_created: int = 0
    users_created: int = 0
    memberships_created: int = 0
    problems: list[ImportProblem] = field(default_factory=list)  # the first KEPT_PROBLEMS


@dataclass(frozen=True)
class LegacyLine:
    tenant: Tenant
    qor: Qor
    username: str
    key: str
    role: str
    content: str
    channel: str
    created_at: datetime
    sender_name: str
    extra: dict[str, Any]

    def external_id(self) -> str:
        """Stable across re-imports of the same message, whatever line it is on."""
        parts = [self.qor.slug, self.username, self.key, self.role, self.channel]
        parts += [self.created_at.isoformat(), self.sender_name, self.content]
        return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()


def _text(obj: dict[str, Any], name: str, *, empty_ok: bool = False) -> str:
    value = obj.get(name)
    if not isinstance(value, str):
        raise BadLine(f"{name!r} must be a string" if name in obj else f"missing {name!r}")
    if not empty_ok and not value.strip():
        raise BadLine(f"{name!r} is empty")
    return value


class _Resolver:
    """Caches of the rows lines refer to, so a big file costs few lookups."""

    def __init__(self) -> None:
        self.tenants: dict[str, tuple[Tenant, ZoneInfo]] = {}
        self.qors: dict[tuple[int, str], Qor] = {}
        self.users: dict[str, User] = {}
        self.members: set[tuple[int, int]] = set()
        self.sessions: dict[tuple[int, int, str, str], Session] = {}

    def forget_writes(self) -> None:
        """After a rolled-back write, rows created in it must be looked up again."""
        self.users.clear()
        self.members.clear()
        self.sessions.clear()

    def tenant(self, slug: str) -> tuple[Tenant, ZoneInfo]:
        if slug not in self.tenants:
            tenant = Tenant.objects.filter(slug=slug).first()
            if tenant is None:
                raise BadLine(f"unknown tenant {slug!r}")
            try:
                zone = ZoneInfo(tenant.timezone or "UTC")
            except (ZoneInfoNotFoundError, ValueError):
                zone = ZoneInfo("UTC")
            self.tenants[slug] = (tenant, zone)
        return self.tenants[slug]

    def qor(self, tenant: Tenant, slug: str) -> Qor:
        if (tenant.pk, slug) not in self.qors:
            qor = Qor.objects.filter(tenant=tenant, slug=slug).first()
            if qor is None:
                raise BadLine(f"unknown qor {slug!r} in tenant {tenant.slug!r}")
            self.qors[(tenant.pk, slug)] = qor
        return self.qors[(tenant.pk, slug)]


def _parse(raw: bytes | str, resolver: _Resolver) -> LegacyLine | None:
    """Validate one line of the export; None for a blank line. Raises BadLine. No writes."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise BadLine("not valid UTF-8") from None
    if not text.strip():
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadLine(f"invalid JSON ({json_problem(exc)} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise BadLine("not a JSON object")
    fields = {name: _text(obj, name, empty_ok=name == "content") for name in REQUIRED}
    sender = obj.get("sender_name") or ""
    if not isinstance(sender, str) or len(sender) > SENDER_MAX:
        raise BadLine(f"'sender_name' must be a string of at most {SENDER_MAX} characters")
    if fields["role"] not in Message.Role.values:
        raise BadLine(
            f"bad role {fields['role']!r} (expected one of {', '.join(Message.Role.values)})"
        )
    if fields["channel"] not in Channel.values:
        raise BadLine(f"bad channel {fields['channel']!r}")
    username = fields["user"]
    try:
        get_user_model().username_validator(username)
    except ValidationError:
        raise BadLine(f"bad username {username!r}") from None
    if len(username) > 150:
        raise BadLine("username longer than 150 characters")
    tenant, zone = resolver.tenant(fields["tenant"])
    qor = resolver.qor(tenant, fields["qor"])
    try:
        created_at = datetime.fromisoformat(fields["created_at"])
    except ValueError:
        raise BadLine(f"bad created_at {fields['created_at']!r} (expected ISO 8601)") from None
    if timezone.is_naive(created_at):
        created_at = created_at.replace(tzinfo=zone)
    try:
        created_at.astimezone(dt_timezone.utc)  # stored in UTC: it must have a year 1-9999 there
    except OverflowError:
        raise BadLine(f"created_at out of range {fields['created_at']!r}") from None
    key = fields["session"]
    if len(key) > THREAD_MAX:
        key = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    extra = {k: v for k, v in obj.items() if k not in KNOWN}
    return LegacyLine(
        tenant=tenant,
        qor=qor,
        username=username,
        key=key,
        role=fields["role"],
        content=fields["content"],
        channel=fields["channel"],
        created_at=created_at,
        sender_name=sender,
        extra=extra,
    )


@dataclass
class _Batch:
    """What one batch wrote; added to the summary only once its transaction committed."""

    imported: int = 0
    already_present: int = 0
    sessions_created: int = 0
    users_created: int = 0
    memberships_created: int = 0
    problems: list[ImportProblem] = field(default_factory=list)


def _user(line: LegacyLine, resolver: _Resolver, batch: _Batch) -> User:
    user = resolver.users.get(line.username)
    if user is None:
        model = get_user_model()
        user = model.objects.filter(username=line.username).first()
        if user is None:
            user = model.objects.create_user(username=line.username)  # no usable password
            batch.users_created += 1
        resolver.users[line.username] = user
    if (line.tenant.pk, user.pk) not in resolver.members:
        _, created = Membership.objects.get_or_create(tenant=line.tenant, user=user)
        batch.memberships_created += created
        resolver.members.add((line.tenant.pk, user.pk))
    return user


def _session(line: LegacyLine, resolver: _Resolver, batch: _Batch) -> Session:
    """The active legacy session of the line's key, created (with its user) on first use.
    Checks ownership before writing anything, so a refused line leaves nothing behind."""
    cache_key = (line.tenant.pk, line.qor.pk, line.channel, line.key)
    session = resolver.sessions.get(cache_key)
    if session is None:
        lookup = dict(
            tenant=line.tenant,
            qor=line.qor,
            kind=Session.Kind.LEGACY,
            channel=line.channel,
            external_thread_id=line.key,
            state=Session.State.ACTIVE,
        )
        session = Session.objects.filter(**lookup).select_related("user").first()
        if session is None:
            user = _user(line, resolver, batch)
            session = Session.objects.create(**lookup, user=user, started_at=line.created_at)
            batch.sessions_created += 1
        resolver.sessions[cache_key] = session
    if session.user is None or session.user.get_username() != line.username:
        raise BadLine(f"session {line.key!r} on {line.channel} belongs to another user")
    _user(line, resolver, batch)  # the owner is a member of the tenant
    return session


def _allocate_seqs(session_id: int, count: int) -> int:
    """Reserve `count` seqs at the end of an active session; return the last one. The
    same locked UPDATE … RETURNING as message_append, for a block of rows at once."""
    table = connection.ops.quote_name(Session._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET last_seq = last_seq + %s WHERE id = %s AND state = %s"
            " RETURNING last_seq",
            [count, session_id, Session.State.ACTIVE],
        )
        row = cursor.fetchone()
    if row is None:
        raise SessionClosed(f"session {session_id} is not active")
    return int(row[0])


def _write(parsed: list[tuple[int, LegacyLine]], resolver: _Resolver, batch: _Batch) -> None:
    """Store a batch's new messages, grouped per session, in the caller's transaction."""
    keyed = [(number, line, line.external_id()) for number, line in parsed]
    seen: set[tuple[int, str]] = set()
    for tenant_id in {line.tenant.pk for _, line in parsed}:
        ids = [eid for _, line, eid in keyed if line.tenant.pk == tenant_id]
        stored = Message.objects.filter(
            tenant_id=tenant_id, external_scope=IMPORT_SCOPE, external_id__in=ids
        ).values_list("external_id", flat=True)
        seen.update((tenant_id, eid) for eid in stored)
    fresh: dict[int, tuple[Session, list[tuple[LegacyLine, str]]]] = {}
    for number, line, eid in keyed:
        if (line.tenant.pk, eid) in seen:
            batch.already_present += 1
            continue
        try:
            session = _session(line, resolver, batch)
        except BadLine as exc:
            batch.problems.append(ImportProblem(number, str(exc)))
            continue
        seen.add((line.tenant.pk, eid))
        fresh.setdefault(session.pk, (session, []))[1].append((line, eid))
    for session, rows in fresh.values():
        last = _allocate_seqs(session.pk, len(rows))
        first = last - len(rows) + 1
        Message.objects.bulk_create(
            [
                Message(
                    tenant_id=session.tenant_id,
                    session=session,
                    seq=first + i,
                    role=line.role,
                    content=line.content,
                    channel=line.channel,
                    sender_name=line.sender_name,
                    created_at=line.created_at,
                    external_scope=IMPORT_SCOPE,
                    external_id=eid,
                    metadata={"legacy": {"session": line.key, **line.extra}},
                )
                for i, (line, eid) in enumerate(rows)
            ],
            batch_size=500,
        )
        # History is not waiting for an answer: the agent must not reply to it.
        session_mark_replied(session_id=session.pk, through_seq=last)
        earliest = min(line.created_at for line, _ in rows)
        if earliest < session.started_at:
            Session.objects.filter(pk=session.pk).update(started_at=earliest)
            session.started_at = earliest
        batch.imported += len(rows)


def legacy_import(
    *, lines: Iterable[bytes | str], on_problem: Callable[[ImportProblem], None] | None = None
) -> ImportSummary:
    """Import an export's lines (numbered from 1) into legacy sessions; see the module doc.

    Lines go in batches of BATCH_LINES, each one transaction: bad lines are left out, the
    others written with a few bulk statements per session. An interrupted import keeps
    whole batches only and can simply be run again. A batch that collides with a
    concurrent writer (the same messages imported at once, a session archived meanwhile)
    is rolled back and retried against what is now stored.
    """
    summary = ImportSummary()
    resolver = _Resolver()
    pending: list[tuple[int, bytes | str]] = []

    def report(problem: ImportProblem) -> None:
        summary.skipped += 1
        if len(summary.problems) < KEPT_PROBLEMS:
            summary.problems.append(problem)
        if on_problem is not None:
            on_problem(problem)

    def flush() -> None:
        parsed: list[tuple[int, LegacyLine]] = []
        bad: list[ImportProblem] = []
        for number, raw in pending:
            try:
                line = _parse(raw, resolver)
            except BadLine as exc:
                bad.append(ImportProblem(number, str(exc)))
                summary.lines += 1
                continue
            if line is not None:
                parsed.append((number, line))
                summary.lines += 1
        pending.clear()
        for attempt in range(1, ATTEMPTS + 1):
            batch = _Batch()
            try:
                with transaction.atomic():
                    _write(parsed, resolver, batch)
                break
            except (IntegrityError, SessionClosed):
                resolver.forget_writes()  # rows created in the rolled-back attempt are gone
                if attempt == ATTEMPTS:
                    raise
        for name in ("imported", "already_present", "sessions_created", "users_created"):
            setattr(summary, name, getattr(summary, name) + getattr(batch, name))
        summary.memberships_created += batch.memberships_created
        for problem in sorted(bad + batch.problems, key=lambda p: p.line):
            report(problem)

    for number, raw in enumerate(lines, start=1):
        pending.append((number, raw))
        if len(pending) >= BATCH_LINES:
            flush()
    if pending:
        flush()
    return summary
