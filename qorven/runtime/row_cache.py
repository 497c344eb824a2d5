"""A per-process cache for rows that change a few times a year and are read on every request.

A webhook resolves its channel binding and checks the tenant's channel switch before it
stores anything; both are rows an owner edits rarely, read hundreds of times a second under
load. A `RowCache` keeps what a loader returned for a key for `QORVEN_ROUTE_CACHE_SECONDS`
(0: no caching). A save or delete in this process clears it at once (the owning app
connects `clear` to its models' signals); a change made by another process — another
server, `qorven bind`, the admin on another host — is seen within those seconds. What runs
after the webhook (the processing task) reads the rows fresh, so a binding switched off
elsewhere is never answered even while a server still accepts its webhooks.

A loader's None is not kept, so a row created elsewhere is found on its first request.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from django.conf import settings

V = TypeVar("V")

_MAX_ENTRIES = 4096  # a flood of distinct keys cannot grow a process without bound
_all: list[RowCache] = []


class RowCache(Generic[V]):
    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._entries: dict[Hashable, tuple[float, V]] = {}
        # Bumped by clear(): a load that started before a clear is not stored after it.
        self._generation = 0
        _all.append(self)

    def get(self, key: Hashable, load: Callable[[], V | None]) -> V | None:
        ttl = float(settings.QORVEN_ROUTE_CACHE_SECONDS)
        if ttl <= 0:
            return load()
        now = time.monotonic()
        hit = self._entries.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        generation = self._generation
        value = load()
        if value is not None:
            with self._lock:
                if generation == self._generation:
                    if len(self._entries) >= _MAX_ENTRIES:
                        self._entries.clear()
                    self._entries[key] = (now + ttl, value)
        return value

    def clear(self, *args: object, **kwargs: object) -> None:
        """Forget everything (also usable as a signal receiver)."""
        with self._lock:
            self._generation += 1
            self._entries.clear()


def row_caches_clear() -> None:
    """Clear every RowCache of this process (a test starting on a fresh database)."""
    for row_cache in _all:
        row_cache.clear()
