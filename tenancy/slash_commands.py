"""Slash commands of tenancy: `/timezone`, the person's own timezone in the workspace."""
from __future__ import annotations

from .errors import NotFound
from .person_timezone import ZoneUnknown, zone_change, zone_said
from .slash_registry import CommandContext, slash_command
from .trust import Trust, trust_allows


@slash_command("timezone", "your timezone for dates, reminders and your heartbeats: "
                           "/timezone Europe/Paris, or /timezone workspace")
def timezone_command(ctx: CommandContext) -> str:
    session = ctx.session
    if session.kind not in ("canonical", "legacy") or session.user is None:
        return "Your timezone is set only in a direct chat with me."
    if not trust_allows(ctx.trust, Trust.PAIRED):
        return "Your timezone is set only once you are paired with me."
    tenant, user = session.tenant, session.user
    asked = ctx.args.strip()
    if not asked:
        return zone_said(tenant=tenant, user=user)
    try:
        return zone_change(tenant=tenant, user=user, asked=asked).message
    except ZoneUnknown as exc:
        return str(exc)
    except NotFound:
        return "Only members of this workspace have a timezone here."
