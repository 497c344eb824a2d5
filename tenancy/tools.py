"""Tools that touch no app's data."""
from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from tenancy.trust import Trust

from .tool_registry import ToolContext, ToolError, tool
from .zones import person_zone_name


@tool(
    name="current_time",
    description="The current date and time. Defaults to the user's timezone.",
    parameters={
        "type": "object",
        "properties": {"timezone": {"type": "string", "description": "IANA name, e.g. Europe/Paris"}},
    },
    min_trust=Trust.PUBLIC,
)
def current_time(ctx: ToolContext, args: dict) -> dict:
    name = args.get("timezone") or person_zone_name(tenant=ctx.tenant, user_id=ctx.user.pk if ctx.user else None)
    try:
        zone = ZoneInfo(name)
    except Exception:
        raise ToolError(f"unknown timezone {name!r}") from None
    now = datetime.now(zone)
    return {"timezone": name, "iso": now.isoformat(timespec="seconds"), "weekday": now.strftime("%A")}
