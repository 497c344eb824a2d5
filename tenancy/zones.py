"""Timezones: the workspace's, and each person's own (the workspace's until they set one).
Every date shown to a person, every due time they give and their own heartbeats' schedules
are in theirs; what a group or the workspace as a whole sees is in the workspace's."""
from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.db.models import OuterRef, Subquery

from .models import Membership, Tenant


def zone_named(name: str) -> ZoneInfo:
    """The zone of that IANA name; UTC when empty or unknown (a name saved before it was
    checked)."""
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return ZoneInfo("UTC")


def tenant_zone(tenant: Tenant) -> ZoneInfo:
    """The tenant's timezone (also the one naive due times are read in); UTC when unset or
    unknown."""
    return zone_named(tenant.timezone)


def person_zone_own(*, tenant: Tenant, user_id: int | None) -> str:
    """The name of the timezone the person set for themselves in this workspace, or ""."""
    if user_id is None:
        return ""
    own = Membership.objects.filter(tenant=tenant, user_id=user_id).values_list("timezone", flat=True).first()
    return own or ""


def person_zone_own_of(*, tenant: str, user: str) -> Subquery:
    """To annotate a read with (the outer query's field paths to the tenant and user ids):
    the name of the timezone the person set in the workspace, "" or None when none
    (person_zone_own, read with a row the caller reads anyway)."""
    return Subquery(Membership.objects.filter(tenant_id=OuterRef(tenant), user_id=OuterRef(user))
                    .order_by().values("timezone")[:1])


def person_zone_of(*, tenant: Tenant, own: str | None) -> ZoneInfo:
    """The person's timezone from the name of their own as read (person_zone_own_of)."""
    return zone_named(own or tenant.timezone or "UTC")


def person_zone_name(*, tenant: Tenant, user_id: int | None) -> str:
    """The name of the person's timezone in this workspace: their own, else the workspace's."""
    return person_zone_own(tenant=tenant, user_id=user_id) or tenant.timezone or "UTC"


def person_zone(*, tenant: Tenant, user_id: int | None) -> ZoneInfo:
    """The person's timezone (see person_zone_name); the workspace's for no one in particular."""
    return zone_named(person_zone_name(tenant=tenant, user_id=user_id))
