"""Trust levels, lowest first. A surface's trust decides which tools and skills it may use."""
from __future__ import annotations

from django.db import models


class Trust(models.TextChoices):
    PUBLIC = "public", "public (anonymous or group chat)"
    PAIRED = "paired", "paired sender"
    TRUSTED = "trusted", "trusted"
    OWNER = "owner", "owner"


_ORDER = [Trust.PUBLIC, Trust.PAIRED, Trust.TRUSTED, Trust.OWNER]
_RANK = {level.value: rank for rank, level in enumerate(_ORDER)}  # asked for every user line of a prompt


def trust_allows(have: str, need: str) -> bool:
    """True when trust level `have` is at least `need` (ValueError for a level that is none)."""
    try:
        return _RANK[have] >= _RANK[need]
    except (KeyError, TypeError):
        raise ValueError(f"not a trust level: {have!r} or {need!r}") from None


def lowest(*levels: str) -> Trust:
    """The lowest of these trust levels."""
    return min((Trust(level) for level in levels), key=_ORDER.index)


# What a member's role earns, on every surface: the one mapping. Owner-only means owner.
ROLE_TRUST = {"owner": Trust.OWNER, "admin": Trust.TRUSTED, "member": Trust.PAIRED}


def role_trust(role: str) -> Trust:
    return ROLE_TRUST.get(role, Trust.PAIRED)
