"""Per-tenant switches for tools and channels (PluginSetting). A missing row means on."""
from __future__ import annotations

from collections.abc import Iterable

from qorven.runtime.prepared_read import PreparedRead
from qorven.runtime.row_cache import RowCache

from .models import PluginSetting, Tenant

# The channel switches webhooks check on every request (cleared on PluginSetting saves).
channel_switches: RowCache[bool] = RowCache("channel switches")

# The channels a tenant can switch off, as the edges register them at startup (like tools
# in tenancy.tool_registry): the admin offers these names, not free text.
switchable_channels: set[str] = set()


def channels_register(names: Iterable[str]) -> None:
    switchable_channels.update(names)


# Read for every message and every turn (compiled once: qorven.runtime.prepared_read).
_switched_off: PreparedRead[PluginSetting] = PreparedRead(
    lambda tenant_id, kind: PluginSetting.objects.filter(tenant_id=tenant_id, kind=kind, enabled=False),
    tenant_id=int, kind=str,
)


def enabled_names(tenant: Tenant, kind: str, names: Iterable[str]) -> set[str]:
    """Those of `names` the tenant has not switched off, as the switches are now."""
    return set(names) - {setting.name for setting in _switched_off.all(tenant_id=tenant.pk, kind=kind)}


def tools_enabled(tenant: Tenant, names: Iterable[str]) -> set[str]:
    return enabled_names(tenant, PluginSetting.Kind.TOOL, names)


def channel_enabled(*, tenant: Tenant, channel: str) -> bool:
    return channel in enabled_names(tenant, PluginSetting.Kind.CHANNEL, [channel])


def channel_enabled_cached(*, tenant: Tenant, channel: str) -> bool:
    """`channel_enabled`, as a webhook checks it: from this process's cache of switches,
    at most QORVEN_ROUTE_CACHE_SECONDS old (see qorven.runtime.row_cache)."""
    return bool(channel_switches.get((tenant.pk, channel), lambda: channel_enabled(tenant=tenant, channel=channel)))
