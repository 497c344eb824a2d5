"""A workspace's timezone, the one every date shown to its people is written in."""
from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .models import Tenant


def tenant_zone(tenant: Tenant) -> ZoneInfo:
    """The tenant's timezone (also the one naive due times are read in); UTC when unset or
    unknown."""
    try:
        return ZoneInfo(tenant.timezone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")
