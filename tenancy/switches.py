"""Per-tenant switches for tools and channels (PluginSetting). A missing row means on."""
from __future__ import annotations

from collections.abc import Iterable

from .models import PluginSetting, Tenant


def enabled_names(tenant: Tenant, kind: str, names: Iterable[str]) -> set[str]:
    names = set(names)
    off = set(
        PluginSetting.objects.filter(tenant=tenant, kind=kind, name__in=names, enabled=False).values_list(
            "name", flat=True
        )
    )
    return names - off


def tools_enabled(tenant: Tenant, names: Iterable[str]) -> set[str]:
    return enabled_names(tenant, PluginSetting.Kind.TOOL, names)


def channel_enabled(*, tenant: Tenant, channel: str) -> bool:
    return channel in enabled_names(tenant, PluginSetting.Kind.CHANNEL, [channel])
