"""Per-tenant switches for tools and channels (PluginSetting). A missing row means on."""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

from django.db.models import Aggregate, F, OuterRef, Subquery, TextField, Value
from django.db.models.functions import Concat

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
# Whether a read inside it passes what it found on (switches_passed_on), or only what a
# read of another table brought is passed on, and every other read stays its own
# (switches_seen_here).
_reads_passed_on: ContextVar[bool] = ContextVar("qorven_switches_reads_passed_on", default=True)


@contextmanager
def switches_passed_on() -> Iterator[None]:
    """For a task that reads a tenant's switches twice in a row — a platform message's
    channel rules read its channel's, then the turn they hand it to reads the tools' a
    moment later — the first read takes every kind in its one statement and the next read
    is answered from it; any read after that is a fresh one (which serves the one after
    it in turn)."""
    with _passing(reads=True):
        yield


@contextmanager
def _passing(*, reads: bool) -> Iterator[None]:
    """Switches passed on inside: brought by reads of the switches themselves too (`reads`),
    or only by reads of another table (switches_seen)."""
    token, reading = _passed_on.set({}), _reads_passed_on.set(reads)
    try:
        yield
    finally:
        _reads_passed_on.reset(reading)
        _passed_on.reset(token)


def switches_seen_here() -> AbstractContextManager[Any]:
    """Where the switches a read of another table brought (switches_seen) answer the next
    read of them, once; every other read is its own, as outside. Inside
    switches_passed_on(), that block's rule goes on."""
    return nullcontext() if _passed_on.get() is not None else _passing(reads=False)


class _KindNames(Aggregate):
    """The rows' "kind:name" as one JSON array: json_agg (text) on PostgreSQL,
    json_group_array on SQLite."""

    function = "JSON_AGG"
    template = "%(function)s(%(expressions)s)::text"
    output_field = TextField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return super().as_sql(compiler, connection, function="JSON_GROUP_ARRAY", template="%(function)s(%(expressions)s)",
                              **extra)


def switched_off_of(tenant_field: str) -> Subquery:
    """For a read of another table: the switched-off switches, of every kind, of the tenant
    in its `tenant_field` (switches_seen takes what it gives), so a task that reads that
    row first reads the switches with it, not in a statement of its own."""
    return Subquery(
        PluginSetting.objects.filter(tenant_id=OuterRef(tenant_field), enabled=False).order_by()
        .values("tenant_id").annotate(names=_KindNames(Concat(F("kind"), Value(":"), F("name"),
                                                              output_field=TextField())))
        .values("names")[:1],
        output_field=TextField(),
    )


def switches_seen(*, tenant_id: int, switched_off: str | None) -> None:
    """Inside switches_passed_on() or switches_seen_here(): the tenant's switches as a read
    of switched_off_of found them now, for the next read of them (as a read of every kind
    passes them on)."""
    passed_on = _passed_on.get()
    if passed_on is None:
        return
    rows = []
    for kind_name in json.loads(switched_off) if switched_off else []:
        kind, _, name = kind_name.partition(":")
        rows.append(PluginSetting(tenant_id=tenant_id, kind=kind, name=name, enabled=False))
    passed_on[tenant_id] = rows


def _switched_off_names(tenant: Tenant, kind: str) -> set[str]:
    passed_on = _passed_on.get()
    if passed_on is None:
        return {setting.name for setting in _switched_off.all(tenant_id=tenant.pk, kind=kind)}
    rows = passed_on.pop(tenant.pk, None)
    if rows is None:
        if not _reads_passed_on.get():
            return {setting.name for setting in _switched_off.all(tenant_id=tenant.pk, kind=kind)}
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
