"""The /beats slash command: the user's heartbeats, answered without a model call."""
from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from tenancy.slash_registry import CommandContext, slash_command

from .selectors import heartbeat_next_run, heartbeat_timezone, heartbeats_visible
from .services import RESERVED_PREFIX


@slash_command("beats", "your scheduled heartbeats and when they run next")
def beats_command(ctx: CommandContext) -> str:
    session = ctx.session
    if session.user is None:
        return "Heartbeats belong to a known user; this conversation has none."
    # The reserved system beats (images, reminders, retention, backups) are the host's upkeep
    # of the workspace, not beats of the person's: listed, a fresh install's /beats showed
    # three `__qorven_…` names to someone who had set none. The admin and the model's
    # list_beats still show them.
    beats = list(heartbeats_visible(tenant=session.tenant, qor=session.qor, user=session.user)
                 .exclude(name__startswith=RESERVED_PREFIX).select_related("tenant", "periodic_task"))
    if not beats:
        return "You have no heartbeats. Ask me to set one up, e.g. \"every weekday at 8, tell me what's on today\"."
    lines = ["Your heartbeats:"]
    for beat in beats:
        zone = heartbeat_timezone(beat)
        if beat.enabled:
            next_run = heartbeat_next_run(beat)
            when = f"next {_day_and_time(next_run)}" if next_run else "no next run"
        else:
            when = "paused"
        where = f" → {beat.deliver_channel}" if beat.deliver_channel else ""
        if beat.managed:
            flags = " (set by the host, read-only)"
        elif beat.deliver_to_id not in (None, session.user_id):  # as the beat tools read it
            flags = " (delivers to someone else, read-only)"
        else:
            flags = ""
        last = f", last {beat.last_status}" if beat.last_status != "never" else ""
        lines.append(f"• {beat.name}: `{beat.cron}` {zone}, {when}{last}{where}{flags}")
    return "\n".join(lines)


def _day_and_time(moment: datetime) -> str:
    """"Mon 29 Feb 09:00", with the year when it is not this one (in the beat's zone): a
    schedule that comes round rarely ('0 9 29 2 1', Feb 29 on a Monday) next runs in 2044."""
    if moment.year == timezone.now().astimezone(moment.tzinfo).year:
        return f"{moment:%a %d %b %H:%M}"
    return f"{moment:%a %d %b %Y %H:%M}"
