"""Reminders that have come due, for scheduled work (heartbeats) to act on."""
from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q

from qorven.models import Qor, Tenant

from .models import Memory


def reminders_due(
    *, tenant: Tenant, qor: Qor, user: AbstractBaseUser, now: datetime, limit: int = 20
) -> list[Memory]:
    """The user's reminders whose time has come (period_start at or before `now`) and that
    have not lapsed (no period_end, or one after `now`), oldest first."""
    return list(
        Memory.objects.filter(
            tenant=tenant, qor=qor, user=user, type=Memory.Type.REMINDER, period_start__lte=now
        )
        .filter(Q(period_end__isnull=True) | Q(period_end__gte=now))
        .order_by("period_start", "id")[:limit]
    )
