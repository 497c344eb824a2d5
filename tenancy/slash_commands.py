"""Slash commands of tenancy: `/timezone`, the person's own timezone in the workspace."""
from __future__ import annotations

from datetime import datetime
from functools import cache
from zoneinfo import available_timezones

from django.core.exceptions import ValidationError

from .errors import NotFound
from .services import membership_timezone_set
from .slash_registry import CommandContext, slash_command
from .trust import Trust, trust_allows
from .zones import person_zone_own, zone_named

FOLLOW_WORKSPACE = {"workspace", "default", "reset"}


@cache
def _known_zones() -> dict[str, str]:
    return {name.lower(): name for name in available_timezones()}


def _spelled(name: str) -> str:
    """The zone's name as the tz database spells it ('europe/paris' → 'Europe/Paris'), or
    the text unchanged when no zone is called that."""
    return _known_zones().get(name.lower(), name)


def _now_in(name: str) -> str:
    return f"{datetime.now(zone_named(name)):%a %H:%M}"


@slash_command("timezone", "your timezone for dates, reminders and your heartbeats: "
                           "/timezone Europe/Paris, or /timezone workspace")
def timezone_command(ctx: CommandContext) -> str:
    session = ctx.session
    if session.kind not in ("canonical", "legacy") or session.user is None:
        return "Your timezone is set only in a direct chat with me."
    if not trust_allows(ctx.trust, Trust.PAIRED):
        return "Your timezone is set only once you are paired with me."
    tenant, user = session.tenant, session.user
    workspace = tenant.timezone or "UTC"
    asked = ctx.args.strip()
    if not asked:
        own = person_zone_own(tenant=tenant, user_id=user.pk)
        if own:
            return f"Your timezone is {own} (it is {_now_in(own)} there). `/timezone workspace` follows the workspace's."
        return (f"You follow the workspace's timezone, {workspace} (it is {_now_in(workspace)} there). "
                "Set your own with `/timezone Europe/Paris` (an IANA name).")
    zone = "" if asked.lower() in FOLLOW_WORKSPACE else _spelled(asked)
    try:
        retimed = membership_timezone_set(tenant=tenant, user=user, timezone=zone)
    except ValidationError:
        return (f"I don't know the timezone {asked!r}. Use an IANA name such as Europe/Paris, "
                "America/New_York or Asia/Tokyo.")
    except NotFound:
        return "Only members of this workspace have a timezone here."
    moved = (f" {retimed.beats_moved} of your heartbeats now "
             f"{'runs' if retimed.beats_moved == 1 else 'run'} in it." if retimed.beats_moved else "")
    if not zone:
        return f"You now follow the workspace's timezone, {workspace}.{moved}"
    return f"Your timezone is now {zone} (it is {_now_in(zone)} there).{moved}"

