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
