"""Beat tools for the agent: the Qor manages its user's heartbeats. A user sees and changes
only their own beats; config-owned (managed) beats are listed but read-only."""
from __future__ import annotations

from typing import Any

from sessions_app.channel_kinds import CHAT_FAMILY
from tenancy.tool_registry import ToolContext, ToolError, tool
from tenancy.trust import Trust

from .errors import HeartbeatInvalid, HeartbeatNotFound, HeartbeatReadOnly
from .models import Heartbeat
from .selectors import (
    heartbeat_for_user,
    heartbeat_next_run,
    heartbeat_timezone,
    heartbeats_visible,
)
from .services import UNSET, heartbeat_create, heartbeat_delete, heartbeat_update

CRON_HELP = (
    "five fields: minute hour day-of-month month day-of-week, e.g. '0 8 * * 1-5' = 08:00 on weekdays, "
    "'*/30 * * * *' = every 30 minutes; or @hourly, @daily, @weekly"
)
_CHANNELS = sorted(CHAT_FAMILY)


def beat_json(beat: Heartbeat, user: Any) -> dict[str, Any]:
    next_run = heartbeat_next_run(beat)
    return {
        "name": beat.name,
        "cron": beat.cron,
        "timezone": heartbeat_timezone(beat),
        "prompt": beat.prompt,
        "enabled": beat.enabled,
        "deliver_channel": beat.deliver_channel or None,
        "read_only": beat.managed or _for_someone_else(beat, user),
        "next_run": next_run.isoformat() if next_run else None,
        "last_run": beat.last_run_at.isoformat() if beat.last_run_at else None,
        "last_status": beat.last_status,
    }


def _user(ctx: ToolContext):
    if ctx.user is None:
        raise ToolError("beats belong to a known user, and this conversation has none")
    return ctx.user


def _own(ctx: ToolContext, name: Any) -> Heartbeat:
    if not isinstance(name, str) or not name.strip():
        raise ToolError("name must be the name of one of your beats (see list_beats)")
    try:
        beat = heartbeat_for_user(tenant=ctx.tenant, qor=ctx.qor, user=_user(ctx), name=name.strip())
    except HeartbeatNotFound:
        raise ToolError(f"you have no beat named {name!r}; list_beats shows them") from None
    if beat.managed:
        raise ToolError(f"{beat.name!r} is managed by the host's configuration and is read-only")
    if _for_someone_else(beat, ctx.user):
        raise ToolError(f"{beat.name!r} delivers to someone else and runs with their chat in view: "
                        "it is read-only here; an admin of the workspace changes it")
    return beat


def _for_someone_else(beat: Heartbeat, user: Any) -> bool:
    """A beat of the user's (its owner) that delivers to another person (the admin set
    it up so): it runs as that person, with their chat, memories and tools, and tells
    them what it found. Its owner's chat does not change it: a prompt written there would
    ask the other person's assistant whatever the owner likes."""
    return beat.deliver_to_id is not None and beat.deliver_to_id != user.pk


def _channel(ctx: ToolContext, args: dict) -> str:
    channel = args.get("deliver_channel") or (ctx.channel if ctx.channel in CHAT_FAMILY else "web")
    if not isinstance(channel, str) or channel not in CHAT_FAMILY:
        raise ToolError(f"deliver_channel must be one of: {', '.join(_CHANNELS)}")
    return channel


def _str_arg(args: dict, key: str) -> Any:
    value = args.get(key, UNSET)
    if value is not UNSET and not isinstance(value, str):
        raise ToolError(f"{key} must be a string")
    return value


def _invalid(exc: HeartbeatInvalid) -> ToolError:
    hint = f" ({CRON_HELP})" if exc.field == "cron" else ""
    return ToolError(f"{exc.field}: {exc.message}{hint}")


@tool(
    name="set_beat",
    description=(
        "Create a heartbeat: a scheduled check-in where you run `prompt` on a cron schedule and message "
        "the user with the result (nothing is sent when there is nothing to say). Use for reminders, "
        "daily briefs and periodic checks the user asks for."
    ),
    parameters={
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "a short unique name, e.g. 'morning-brief'"},
            "cron": {"type": "string", "description": CRON_HELP},
            "prompt": {"type": "string", "description": "what to check or say each time, as an instruction to yourself"},
            "timezone": {"type": "string", "description": "IANA name; default: the user's own timezone"},
            "deliver_channel": {"type": "string", "enum": _CHANNELS,
                                "description": "where to send results; default: the current surface"},
        },
        "required": ["name", "cron", "prompt"],
    },
    min_trust=Trust.PAIRED,
)
def set_beat(ctx: ToolContext, args: dict) -> dict:
    user = _user(ctx)
    for key in ("name", "cron", "prompt"):
        if not isinstance(args.get(key), str):
            raise ToolError(f"{key} must be a string")
    timezone = _str_arg(args, "timezone")
    try:
        beat = heartbeat_create(
            tenant=ctx.tenant, qor=ctx.qor, name=args["name"], cron=args["cron"], prompt=args["prompt"],
            timezone="" if timezone is UNSET else timezone, owner=user, deliver_to=user,
            deliver_channel=_channel(ctx, args),
        )
    except HeartbeatInvalid as exc:
        raise _invalid(exc) from None
    return {"created": beat_json(beat, user)}


@tool(
    name="list_beats",
    description="List the user's heartbeats (and the host's read-only ones) with their schedules and last runs.",
    parameters={"type": "object", "properties": {}},
    min_trust=Trust.PAIRED,
)
def list_beats(ctx: ToolContext, args: dict) -> dict:
    beats = heartbeats_visible(tenant=ctx.tenant, qor=ctx.qor, user=_user(ctx)).select_related("tenant", "periodic_task")
    return {"beats": [beat_json(b, ctx.user) for b in beats]}


@tool(
    name="update_beat",
    description="Change one of the user's heartbeats: its schedule, prompt, timezone, channel, or pause/resume it.",
    parameters={
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "the beat to change"},
            "new_name": {"type": "string"},
            "cron": {"type": "string", "description": CRON_HELP},
            "prompt": {"type": "string"},
            "timezone": {"type": "string"},
            "deliver_channel": {"type": "string", "enum": _CHANNELS},
            "enabled": {"type": "boolean", "description": "false pauses the beat, true resumes it"},
        },
        "required": ["name"],
    },
    min_trust=Trust.PAIRED,
)
def update_beat(ctx: ToolContext, args: dict) -> dict:
    beat = _own(ctx, args.get("name"))
    enabled = args.get("enabled", UNSET)
    if enabled is not UNSET and not isinstance(enabled, bool):
        raise ToolError("enabled must be true or false")
    channel = _str_arg(args, "deliver_channel")
    if channel is not UNSET and channel not in CHAT_FAMILY:
        raise ToolError(f"deliver_channel must be one of: {', '.join(_CHANNELS)}")
    try:
        beat = heartbeat_update(
            heartbeat=beat, name=_str_arg(args, "new_name"), cron=_str_arg(args, "cron"),
            prompt=_str_arg(args, "prompt"), timezone=_str_arg(args, "timezone"), deliver_channel=channel,
            enabled=enabled,
        )
    except HeartbeatInvalid as exc:
        raise _invalid(exc) from None
    except HeartbeatReadOnly as exc:
        raise ToolError(str(exc)) from None
    return {"updated": beat_json(beat, ctx.user)}


@tool(
    name="delete_beat",
    description="Delete one of the user's heartbeats for good (update_beat with enabled=false only pauses it).",
    parameters={
        "type": "object",
        "properties": {"name": {"type": "string", "description": "the beat to delete"}},
        "required": ["name"],
    },
    min_trust=Trust.PAIRED,
)
def delete_beat(ctx: ToolContext, args: dict) -> dict:
    beat = _own(ctx, args.get("name"))
    try:
        heartbeat_delete(heartbeat=beat)
    except HeartbeatReadOnly as exc:
        raise ToolError(str(exc)) from None
    return {"deleted": beat.name}
