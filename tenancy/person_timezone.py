"""A person's own timezone as they read and change it, in the same words wherever they do:
`/timezone`, the chat page's "Your timezone" and the JSON API."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError

from qorven.runtime.zone_names import zones_choosable

from .models import Tenant
from .services import membership_timezone_set
from .zones import person_zone_own, zone_named

# Words that mean "follow the workspace's timezone" (as does an empty name).
FOLLOW_WORKSPACE = frozenset({"workspace", "default", "reset"})
# The areas of the tz database's own zone names: the list offered to pick from leaves out
# the old aliases (EST, Cuba, US/Eastern) and Etc/GMT+5, whose sign reads backwards.
AREAS = ("Africa/", "America/", "Antarctica/", "Arctic/", "Asia/", "Atlantic/", "Australia/", "Europe/",
         "Indian/", "Pacific/")


class ZoneUnknown(ValueError):
    """A timezone name this machine does not know; the message says so, to show as is."""


@dataclass(frozen=True)
class ZoneChanged:
    zone: str  # the person's own now, "" for the workspace's
    beats_moved: int
    message: str  # what `/timezone <name>` answers


@cache
def _known_zones() -> dict[str, str]:
    return {name.lower(): name for name in zones_choosable()}


@cache
def zones_offered() -> tuple[str, ...]:
    """The IANA names a person picks from, sorted: every place's zone, and UTC. Any other
    name a person can choose is still accepted when typed."""
    return tuple(sorted({n for n in zones_choosable() if n.startswith(AREAS)} | {"UTC"}))


def _spelled(name: str) -> str:
    """The zone's name as the tz database spells it ('europe/paris' → 'Europe/Paris'), or
    the text unchanged when no zone is called that."""
    return _known_zones().get(name.lower(), name)


def _now_in(name: str) -> str:
    return f"{datetime.now(zone_named(name)):%a %H:%M}"


def zone_said(*, tenant: Tenant, user: User) -> str:
    """What `/timezone` alone answers: the person's timezone and the time it is there."""
    own = person_zone_own(tenant=tenant, user_id=user.pk)
    if own:
        return f"Your timezone is {own} (it is {_now_in(own)} there). `/timezone workspace` follows the workspace's."
    workspace = tenant.timezone or "UTC"
    return (f"You follow the workspace's timezone, {workspace} (it is {_now_in(workspace)} there). "
            "Set your own with `/timezone Europe/Paris` (an IANA name).")


def zone_change(*, tenant: Tenant, user: User, asked: str) -> ZoneChanged:
    """Make `asked` the person's own timezone in the workspace: an IANA name in any letter
    case, or "" (or a FOLLOW_WORKSPACE word) to follow the workspace's; their heartbeats
    that follow it move with it. Raises ZoneUnknown for a name this machine does not know
    (nothing changes) and tenancy.errors.NotFound for someone not a member."""
    asked = asked.strip()
    zone = "" if not asked or asked.lower() in FOLLOW_WORKSPACE else _spelled(asked)
    try:
        retimed = membership_timezone_set(tenant=tenant, user=user, timezone=zone)
    except ValidationError:
        shown = asked if len(asked) <= 64 else asked[:64] + "…"  # no zone's name is longer
        raise ZoneUnknown(f"I don't know the timezone {shown!r}. Use an IANA name such as Europe/Paris, "
                          "America/New_York or Asia/Tokyo.") from None
    moved = (f" {retimed.beats_moved} of your heartbeats now "
             f"{'runs' if retimed.beats_moved == 1 else 'run'} in it." if retimed.beats_moved else "")
    if not zone:
        message = f"You now follow the workspace's timezone, {tenant.timezone or 'UTC'}.{moved}"
    else:
        message = f"Your timezone is now {zone} (it is {_now_in(zone)} there).{moved}"
    return ZoneChanged(zone=zone, beats_moved=retimed.beats_moved, message=message)


def zone_json(*, tenant: Tenant, user: User, message: str = "") -> dict[str, Any]:
    """The person's timezone as the chat page and the API give it: their own ("" when they
    follow the workspace's), the workspace's, the one in force, the time there now (ISO
    8601, its offset included) and `message`, else what `/timezone` says."""
    own = person_zone_own(tenant=tenant, user_id=user.pk)
    workspace = tenant.timezone or "UTC"
    zone = own or workspace
    return {"timezone": own, "workspace": workspace, "zone": zone,
            "now": datetime.now(zone_named(zone)).isoformat(timespec="seconds"),
            "message": message or zone_said(tenant=tenant, user=user)}
