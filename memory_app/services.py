"""Writes of long-term memory."""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction

from qorven.models import Qor, Tenant

from .models import Memory

_SPACES = re.compile(r"\s+")


def memory_normalize(content: str) -> str:
    """The form two notes are compared in: case-folded, whitespace collapsed, trimmed."""
    return _SPACES.sub(" ", content).strip().casefold()


def memory_content_hash(content: str) -> str:
    return hashlib.sha256(memory_normalize(content).encode()).hexdigest()


def memory_add(
    *,
    tenant: Tenant,
    qor: Qor,
    user: AbstractBaseUser | None,
    type: str,
    content: str,
    channels: Iterable[str] = (),
    period_start: datetime | None = None,
    period_end: datetime | None = None,
    source_session_id: int | None = None,
) -> tuple[Memory, bool]:
    """Store a memory unless the same user already has one of this type with the same
    normalised content. Returns (memory, created)."""
    if qor.tenant_id != tenant.pk:
        raise ValueError("qor does not belong to tenant")
    content = content.strip()
    if not content:
        raise ValueError("a memory needs content")
    digest = memory_content_hash(content)
    lookup = dict(tenant=tenant, qor=qor, user=user, type=type, content_hash=digest)
    existing = Memory.objects.filter(**lookup).first()
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            memory = Memory.objects.create(
                **lookup,
                content=content,
                channels=sorted(set(channels)),
                period_start=period_start,
                period_end=period_end,
                source_session_id=source_session_id,
            )
    except IntegrityError:
        return Memory.objects.get(**lookup), False
    return memory, True
