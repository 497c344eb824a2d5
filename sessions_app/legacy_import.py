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
(scope "legacy-import"), which `message_append` dedupes on, and the check comes before
any session is created, so a re-import after collapse-sessions does not revive empty
sessions. Imported messages are not broadcast or delivered anywhere, and count as
answered (the agent does not reply to history).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from qorven.models import Membership, Qor, Tenant

from .channels import Channel
from .errors import SessionClosed
from .models import Message, Session
from .services import message_append, session_mark_replied

IMPORT_SCOPE = "legacy-import"
BATCH_LINES = 500  # lines per transaction; each line is its own savepoint inside it
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
        self.users: dict[str, AbstractBaseUser] = {}
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
        raise BadLine(f"invalid JSON ({exc.msg} at column {exc.colno})") from None
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


def _user(line: LegacyLine, resolver: _Resolver, summary: ImportSummary) -> AbstractBaseUser:
    user = resolver.users.get(line.username)
    if user is None:
        model = get_user_model()
        user = model.objects.filter(username=line.username).first()
        if user is None:
            user = model.objects.create_user(username=line.username)  # no usable password
            summary.users_created += 1
        resolver.users[line.username] = user
    if (line.tenant.pk, user.pk) not in resolver.members:
        _, created = Membership.objects.get_or_create(tenant=line.tenant, user=user)
        summary.memberships_created += created
        resolver.members.add((line.tenant.pk, user.pk))
    return user


def _session(
    line: LegacyLine, user: AbstractBaseUser, resolver: _Resolver, summary: ImportSummary
) -> Session:
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
        session = Session.objects.filter(**lookup).first()
        if session is None:
            session = Session.objects.create(**lookup, user=user, started_at=line.created_at)
            summary.sessions_created += 1
        resolver.sessions[cache_key] = session
    if session.user_id != user.pk:
        raise BadLine(f"session {line.key!r} on {line.channel} belongs to another user")
    if line.created_at < session.started_at:
        session.started_at = line.created_at
        session.save(update_fields=["started_at"])
    return session


def _store(
    line: LegacyLine, resolver: _Resolver, summary: ImportSummary, touched: dict[int, int]
) -> None:
    external_id = line.external_id()
    seen = Message.objects.filter(
        tenant=line.tenant, external_scope=IMPORT_SCOPE, external_id=external_id
    )
    if seen.exists():
        summary.already_present += 1
        return
    user = _user(line, resolver, summary)
    fields: dict[str, Any] = dict(
        role=line.role,
        content=line.content,
        channel=line.channel,
        sender_name=line.sender_name,
        created_at=line.created_at,
        external_scope=IMPORT_SCOPE,
        external_id=external_id,
        metadata={"legacy": {"session": line.key, **line.extra}},
        notify=False,
    )
    try:
        result = message_append(session=_session(line, user, resolver, summary), **fields)
    except SessionClosed:
        # Archived meanwhile (collapse-sessions ran): later lines go to a new legacy session.
        resolver.sessions.clear()
        result = message_append(session=_session(line, user, resolver, summary), **fields)
    if result.created:
        summary.imported += 1
        touched[result.message.session_id] = result.message.seq
    else:
        summary.already_present += 1


def legacy_import(
    *, lines: Iterable[bytes | str], on_problem: Callable[[ImportProblem], None] | None = None
) -> ImportSummary:
    """Import an export's lines (numbered from 1) into legacy sessions; see the module doc.

    Lines are committed in batches of BATCH_LINES, each line in its own savepoint, so an
    interrupted import keeps whole lines only and can simply be run again.
    """
    summary = ImportSummary()
    resolver = _Resolver()
    batch: list[tuple[int, bytes | str]] = []

    def report(number: int, reason: str) -> None:
        summary.skipped += 1
        problem = ImportProblem(number, reason)
        if len(summary.problems) < KEPT_PROBLEMS:
            summary.problems.append(problem)
        if on_problem is not None:
            on_problem(problem)

    def flush() -> None:
        touched: dict[int, int] = {}
        with transaction.atomic():
            for number, raw in batch:
                try:
                    line = _parse(raw, resolver)
                except BadLine as exc:
                    summary.lines += 1
                    report(number, str(exc))
                    continue
                if line is None:
                    continue
                summary.lines += 1
                try:
                    with transaction.atomic():
                        _store(line, resolver, summary, touched)
                except (BadLine, IntegrityError) as exc:
                    # The savepoint undid this line's writes, a new user or session included.
                    resolver.forget_writes()
                    reason = (
                        str(exc)
                        if isinstance(exc, BadLine)
                        else f"rejected by the database ({exc})"
                    )
                    report(number, reason)
            for session_id, seq in touched.items():
                # History is not waiting for an answer: the agent must not reply to it.
                session_mark_replied(session_id=session_id, through_seq=seq)
        batch.clear()

    for number, raw in enumerate(lines, start=1):
        batch.append((number, raw))
        if len(batch) >= BATCH_LINES:
            flush()
    if batch:
        flush()
    return summary
