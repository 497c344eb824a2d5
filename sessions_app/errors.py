from __future__ import annotations


class SessionNotFound(Exception):
    """No such session for this tenant/user (missing and foreign look the same)."""


class SessionClosed(Exception):
    """The session was archived; resolve the active one again and append there."""


class LeaseLost(Exception):
    """The session's turn lease is no longer this turn's (see sessions_app.leases)."""


class SenderLeft(Exception):
    """The person a turn answers is no longer an active member of the session's tenant
    (removed, or their account deactivated, while the model thought): nothing is stored
    for them (sessions_app.turn_writes.reply_store)."""

    reason = "the sender is no longer a member of the workspace"  # kept on the message, for the admin


class WorkspaceSuspended(SenderLeft):
    """The host suspended the session's workspace (tenancy.services.tenant_suspend) while
    the model thought: nothing is stored for anyone in it, a group's chat included, and the
    turn ends as for a person who left (no tool run, no reply, nothing said)."""

    reason = "the workspace is suspended"
