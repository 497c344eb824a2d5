"""Per-tenant switches for tools and channels (PluginSetting). A missing row means on."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

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


_switched_off_any: PreparedRead[PluginSetting] = PreparedRead(
    lambda tenant_id: PluginSetting.objects.filter(tenant_id=tenant_id, enabled=False).order_by(),
    tenant_id=int,
)

# Inside `switches_passed_on()`: a tenant's switches of every kind as one read found them,
# kept for the next read of that tenant's switches, once.
_passed_on: ContextVar[dict[int, list[PluginSetting]] | None] = ContextVar("qorven_switches_passed_on", default=None)


@contextmanager
def switches_passed_on() -> Iterator[None]:
    """For a task that reads a tenant's switches twice in a row — a platform message's
    channel rules read its channel's, then the turn they hand it to reads the tools' a
    moment later — the first read takes every kind in its one statement and the next read
    is answered from it; any read after that is a fresh one (which serves the one after
    it in turn)."""
    token = _passed_on.set({})
    try:
        yield
    finally:
        _passed_on.reset(token)


def _switched_off_names(tenant: Tenant, kind: str) -> set[str]:
    passed_on = _passed_on.get()
    if passed_on is None:
        return {setting.name for setting in _switched_off.all(tenant_id=tenant.pk, kind=kind)}
    rows = passed_on.pop(tenant.pk, None)
    if rows is None:
        rows = passed_on[tenant.pk] = _switched_off_any.all(tenant_id=tenant.pk)
    return {setting.name for setting in rows if setting.kind == kind}


def enabled_names(tenant: Tenant, kind: str, names: Iterable[str]) -> set[str]:
    """Those of `names` the tenant has not switched off, as the switches are now."""
    return set(names) - _switched_off_names(tenant, kind)


def tools_enabled(tenant: Tenant, names: Iterable[str]) -> set[str]:
    return enabled_names(tenant, PluginSetting.Kind.TOOL, names)


def channel_enabled(*, tenant: Tenant, channel: str) -> bool:
    return channel in enabled_names(tenant, PluginSetting.Kind.CHANNEL, [channel])


def channel_enabled_cached(*, tenant: Tenant, channel: str) -> bool:
    """`channel_enabled`, as a webhook checks it: from this process's cache of switches,
    at most QORVEN_ROUTE_CACHE_SECONDS old (see qorven.runtime.row_cache)."""
    return bool(channel_switches.get((tenant.pk, channel), lambda: channel_enabled(tenant=tenant, channel=channel)))
