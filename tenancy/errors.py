from __future__ import annotations


class NotFound(Exception):
    """A tenant-owned row that does not exist or belongs to someone else (one error for both)."""


class InactiveUser(Exception):
    """A deactivated account: what would be made for it (a token, a delivery) never works."""
