"""Trust levels, lowest first. A surface's trust decides which tools and skills it may use."""
from __future__ import annotations

from django.db import models


class Trust(models.TextChoices):
    PUBLIC = "public", "public (anonymous or group chat)"
    PAIRED = "paired", "paired sender"
    TRUSTED = "trusted", "trusted"
    OWNER = "owner", "owner"


_ORDER = [Trust.PUBLIC, Trust.PAIRED, Trust.TRUSTED, Trust.OWNER]


def trust_allows(have: str, need: str) -> bool:
    """True when trust level `have` is at least `need`."""
    return _ORDER.index(Trust(have)) >= _ORDER.index(Trust(need))


def lowest(*levels: str) -> Trust:
    """The lowest of these trust levels."""
    return min((Trust(level) for level in levels), key=_ORDER.index)


# What a member's role earns, on every surface: the one mapping. Owner-only means owner.
ROLE_TRUST = {"owner": Trust.OWNER, "admin": Trust.TRUSTED, "member": Trust.PAIRED}


def role_trust(role: str) -> Trust:
    return ROLE_TRUST.get(role, Trust.PAIRED)
