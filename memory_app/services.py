"""Writes of long-term memory.

Every insert and edit goes through here so a memory's search text (Chinese, Japanese and
Thai spaced out: memory_app.fulltext) and SQLite's FTS5 index stay in step with its
content (PostgreSQL's `search_vector` is generated from the row and needs nothing). Deletes need
nothing either: on SQLite a trigger drops the entry of a memory however its row goes
(a cascade from a deleted tenant, Qor or user included; migrations/_trigger.py).
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from qorven.runtime.sqlite_erase import SettleOnOwnerDelete, fulltext_settle
from qorven.runtime.storable_text import storable
from tenancy.models import Qor, Tenant

from .fulltext import FTS_TABLE, owner_token, search_text
from .models import Memory

_SPACES = re.compile(r"\s+")


class DuplicateMemory(ValueError):
    """The user already has a memory of this type with the same (normalised) content."""


def memory_normalize(content: str) -> str:
    """The form two notes are compared in: case-folded, whitespace collapsed, trimmed."""
    return _SPACES.sub(" ", content).strip().casefold()


def memory_content_hash(content: str) -> str:
    return hashlib.sha256(memory_normalize(content).encode()).hexdigest()


def memory_add(
    *,
    tenant: Tenant,
    qor: Qor,
    user: User | None,
    type: str,
    content: str,
    channels: Iterable[str] = (),
    period_start: datetime | None = None,
    period_end: datetime | None = None,
    source_session_id: int | None = None,
) -> tuple[Memory, bool]:
    """Store a memory unless the same user already has one of this type with the same
    normalised content; that one, said again later (at `period_end`, or now), is dated
    then (Memory.said_at), so a fact said again after a contrary one reads as the newer.
    Returns (memory, created)."""
    if qor.tenant_id != tenant.pk:
        raise ValueError("qor does not belong to tenant")
    content = storable(content).strip()
    if not content:
        raise ValueError("a memory needs content")
    if type not in Memory.Type.values:
        raise ValueError(f"unknown memory type {type!r}")
    digest = memory_content_hash(content)
    lookup = dict(tenant=tenant, qor=qor, user=user, type=type, content_hash=digest)
    existing = Memory.objects.filter(**lookup).first()
    if existing is not None:
        return memory_said_again(memory=existing, at=period_end or timezone.now()), False
    try:
        with transaction.atomic():
            memory = Memory.objects.create(
                **lookup,
                content=content,
                search_text=search_text(content),
                channels=sorted(set(channels)),
                period_start=period_start,
                period_end=period_end,
                source_session_id=source_session_id,
            )
            _index_put(memory)
    except IntegrityError:
        return memory_said_again(memory=Memory.objects.get(**lookup), at=period_end or timezone.now()), False
    return memory, True


def memory_said_again(*, memory: Memory, at: datetime) -> Memory:
    """A note said again at `at` (in the same words, or in others: the memory flush's
    "known"): when that is later than it was last said, its period reaches `at` (a
    reminder's period is its due time, moved by reminder_add instead)."""
    if memory.type == Memory.Type.REMINDER or at <= memory.said_at:
        return memory
    memory.period_start = memory.period_start or memory.created_at
    memory.period_end = at
    memory.save(update_fields=["period_start", "period_end", "updated_at"])
    return memory


@transaction.atomic
def reminder_add(
    *,
    tenant: Tenant,
    qor: Qor,
    user: User | None,
    content: str,
    due: datetime,
    channels: Iterable[str] = (),
    source_session_id: int | None = None,
) -> tuple[Memory, bool]:
    """Store a reminder that comes due at `due` (its period_start). A reminder the user
    already has (the same normalised text) with another due time is moved to `due` and
    armed again, so "remind me to water the plants" said again for next week comes due
    again. Returns (memory, created)."""
    memory, created = memory_add(
        tenant=tenant, qor=qor, user=user, type=Memory.Type.REMINDER, content=content, channels=channels,
        period_start=due, source_session_id=source_session_id,
    )
    if not created and memory.period_start != due:
        memory.period_start, memory.period_end = due, None
        memory.save(update_fields=["period_start", "period_end", "updated_at"])
    return memory, created


def reminders_mark_done(*, tenant: Tenant, reminder_ids: Iterable[int], at: datetime) -> int:
    """Mark reminders as done at `at` (they have reached the user): their period ends
    then, so they no longer come due. Reminders already done stay as they were; returns
    how many were marked."""
    ids = list(reminder_ids)
    if not ids:
        return 0
    return (
        Memory.objects.filter(tenant=tenant, type=Memory.Type.REMINDER, pk__in=ids)
        .filter(Q(period_end__isnull=True) | Q(period_end__gt=at))
        .update(period_end=at, updated_at=timezone.now())
    )


@transaction.atomic
def memory_update(*, memory: Memory, content: str | None = None, type: str | None = None, **fields: object) -> Memory:
    """Change a memory (the admin's edit). Raises DuplicateMemory when the new content or
    type collides with another memory of the same user."""
    if content is not None:
        content = storable(content).strip()
        if not content:
            raise ValueError("a memory needs content")
        memory.content = content
    if type is not None:
        memory.type = type
    for name, value in fields.items():
        setattr(memory, name, value)
    memory.content_hash = memory_content_hash(memory.content)
    memory.search_text = search_text(memory.content)  # the admin's form sets content itself
    clash = Memory.objects.filter(
        tenant_id=memory.tenant_id, qor_id=memory.qor_id, user_id=memory.user_id, type=memory.type,  # type: ignore[misc]  # None: IS NULL
        content_hash=memory.content_hash,
    ).exclude(pk=memory.pk)
    if clash.exists():
        raise DuplicateMemory("this user already has the same memory")
    memory.save()
    _index_put(memory)
    return memory


@transaction.atomic
def memory_delete(*, memories: Iterable[Memory]) -> int:
    """Delete these memories (and their index entries, words included); returns how many."""
    ids = [m.pk for m in memories]
    if not ids:
        return 0
    deleted, _ = Memory.objects.filter(pk__in=ids).delete()
    fulltext_settle(FTS_TABLE)
    return deleted


@dataclass(frozen=True)
class MemoryScope:
    """Whose memories: a tenant, optionally narrowed to a Qor and/or a user; or with no
    tenant, a user across every tenant, or (everything=True) all of them."""

    tenant: Tenant | None = None
    qor: Qor | None = None
    user: User | None = None
    everything: bool = False

    def __post_init__(self) -> None:
        if self.qor is not None and (self.tenant is None or self.qor.tenant_id != self.tenant.pk):
            raise ValueError("a Qor scope needs its tenant")
        if not self.everything and self.tenant is None and self.user is None:
            raise ValueError("give a tenant, a Qor or a user, or everything=True")

    def filters(self, prefix: str = "") -> dict[str, object]:
        out: dict[str, object] = {}
        if self.tenant is not None:
            out[f"{prefix}tenant"] = self.tenant
        if self.qor is not None:
            out[f"{prefix}qor"] = self.qor
        if self.user is not None:
            out[f"{prefix}user"] = self.user
        return out


@transaction.atomic
def memory_clear(*, scope: MemoryScope) -> int:
    """Delete every memory in `scope` with its index entries, words included, in set-based
    statements (no rows loaded into Python); returns how many memories went."""
    deleted, _ = Memory.objects.filter(**scope.filters()).delete()
    if deleted:
        fulltext_settle(FTS_TABLE)
    return deleted


def _index_put(memory: Memory) -> None:
    if connection.vendor != "sqlite":
        return
    owner = owner_token(tenant_id=memory.tenant_id, qor_id=memory.qor_id, user_id=memory.user_id)
    with connection.cursor() as cursor:
        # REPLACE: an id reused after a test flush (or an edit) overwrites its old entry.
        cursor.execute(
            f"INSERT OR REPLACE INTO {FTS_TABLE} (rowid, owner, content) VALUES (%s, %s, %s)",
            [memory.pk, owner, memory.search_text or memory.content],
        )


# A person, workspace or Qor deleted takes their memories by cascade (memory_app.apps).
memory_index_settle_receiver = SettleOnOwnerDelete(FTS_TABLE, "memory_app.settle_index")
