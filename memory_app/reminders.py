"""Reminders: the time a reminder comes due, and the reminders that have come due, for
scheduled work (heartbeats) to act on.

A reminder's due time is its `period_start`; a reminder that has reached the user (or has
lapsed) has a `period_end` in the past. A reminder with no `period_start` is undated: it is
kept in memory but never comes due by itself.
"""
from __future__ import annotations

from datetime import date, datetime, time, tzinfo

from django.contrib.auth.models import User
from django.db.models import Q

from qorven.runtime.dated_everywhere import dated_everywhere
from tenancy.models import Qor, Tenant

from .models import Memory

# A due date without a time: the reminder comes due at this local time that day.
DATE_ONLY_AT = time(9, 0)


class DueError(ValueError):
    """A due time that cannot be read; the message says what to write instead."""




def due_parse(text: str, *, zone: tzinfo) -> datetime:
    """An ISO 8601 due time as an aware datetime. A date-time with an offset (or Z) is
    taken as it is; one without is local time in `zone`; a bare date means 09:00 local
    that day. Raises DueError with a reason a person (or a model) can act on."""
    if not isinstance(text, str) or not text.strip():
        raise DueError("due must be an ISO 8601 date (2026-03-14) or date-time (2026-03-14T15:30)")
    text = text.strip()
    try:
        day = date.fromisoformat(text)
    except ValueError:
        pass
    else:
        return datetime.combine(day, DATE_ONLY_AT, tzinfo=zone)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise DueError(
            f"due {text!r} is not an ISO 8601 date or date-time; write e.g. 2026-03-14 (09:00 that day), "
            "2026-03-14T15:30 (local time) or 2026-03-14T15:30+01:00, working relative dates out first"
        ) from None
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=zone)
    if not dated_everywhere(moment):  # stored in UTC, shown in the person's own timezone
        raise DueError(f"due {text!r} is out of range; give a date between years 1 and 9999")
    return moment


def reminders_due_in_tenant(*, tenant: Tenant, now: datetime, limit: int = 500) -> list[Memory]:
    """Every member's reminders in the tenant that have come due and not lapsed, oldest
    first, with their Qor and user loaded (for delivering them). Someone who left the
    tenant, or whose account was deactivated, is no longer written to (as
    tenancy.access reads membership): their reminders stay, undelivered."""
    return list(_due(tenant, now).filter(user__memberships__tenant=tenant, user__is_active=True)
                .select_related("qor", "user")[:limit])


def reminders_due(
    *, tenant: Tenant, qor: Qor, user: User, now: datetime, limit: int = 20
) -> list[Memory]:
    """The user's reminders whose time has come (period_start at or before `now`) and that
    have not lapsed (no period_end, or one after `now`), oldest first."""
    return list(_due(tenant, now).filter(qor=qor, user=user)[:limit])


def _due(tenant: Tenant, now: datetime):
    """The tenant's reminders whose time has come and that have not lapsed, oldest first."""
    return (
        Memory.objects.filter(tenant=tenant, type=Memory.Type.REMINDER, period_start__lte=now)
        .filter(Q(period_end__isnull=True) | Q(period_end__gt=now))
        .order_by("period_start", "id")
    )
