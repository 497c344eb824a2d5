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

Within `cached_only()` nothing is loaded: what is not kept raises NotCached. Code on an
event loop (which must not wait for the database) reads the cache so, as a webhook's
screening does before the webhook takes a place in the storing queue
(channels_app.webhook_ingest).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Generic, TypeVar

from django.conf import settings

V = TypeVar("V")

_MAX_ENTRIES = 4096  # a flood of distinct keys cannot grow a process without bound
_all: list[RowCache] = []
# Within cached_only(): whether an entry past its time may be read (None: load as usual).
_cached_only: ContextVar[bool | None] = ContextVar("row_cache_cached_only", default=None)


class NotCached(LookupError):
    """What a RowCache does not keep (or keeps past its time) was asked within cached_only()."""


@contextmanager
def cached_only(*, stale: bool = False) -> Iterator[None]:
    """Read every RowCache without loading: NotCached for what it does not keep. With
    `stale`, an entry past its time is read too (what it was when last loaded)."""
    token = _cached_only.set(stale)
    try:
        yield
    finally:
        _cached_only.reset(token)


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
        stale = _cached_only.get()
        if ttl <= 0 and stale is None:
            return load()
        now = time.monotonic()
        hit = self._entries.get(key)
        if hit is not None and (hit[0] > now or stale):
            return hit[1]
        if stale is not None:
            raise NotCached(self.name)
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
        """Have every entry loaded again on its next read (also usable as a signal
        receiver). What they were is still read within cached_only(stale=True): a save
        does not leave every webhook of the process unscreened until it is read again."""
        with self._lock:
            self._generation += 1
            self._entries = {key: (0.0, value) for key, (_, value) in self._entries.items()}

    def forget(self) -> None:
        """Forget everything, stale entries too."""
        with self._lock:
            self._generation += 1
            self._entries = {}


def row_caches_clear() -> None:
    """Forget what every RowCache of this process keeps (a test starting on a fresh database)."""
    for row_cache in _all:
        row_cache.forget()
