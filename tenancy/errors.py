from __future__ import annotations


class NotFound(Exception):
    """A tenant-owned row that does not exist or belongs to someone else (one error for both)."""
