"""A per-process cache for rows that change a few times a year and are read on every request.

A webhook resolves its channel binding and checks the tenant's channel switch before it
stores anything; both are rows an owner edits rarely, read hundreds of times a second under
load. A `RowCache` keeps what a loader returned for a key for `QORVEN_ROUTE_CACHE_SECONDS`
(0: no caching; what was loaded is then kept past its time at once, read only within
`cached_only(stale=True)`). A save or delete in this process clears it at once (the owning app
connects `clear` to its models' signals); a change made by another process — another
server, `qorven bind`, the admin on another host — is seen within those seconds. What runs
after the webhook (the processing task) reads the rows fresh, so a binding switched off
elsewhere is never answered even while a server still accepts its webhooks.

A loader's None is not kept, so a row created elsewhere is found on its first request;
and what was kept for its key is forgotten, stale too: the row it was is gone or changed
elsewhere (a binding's secret replaced, its lookup key with it), and what it was no longer
tells whose a request is.

Within `cached_only()` nothing is loaded: what is not kept raises NotCached. Code on an
event loop (which must not wait for the database) reads the cache so, as a webhook's
screening does before the webhook takes a place in the storing queue
(channels_app.webhook_ingest).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

from django.conf import settings

V = TypeVar("V")

_MAX_ENTRIES = 4096  # a flood of distinct keys cannot grow a process without bound
_all: list[RowCache] = []
# Within cached_only(): whether an entry past its time may be read (None: load as usual).
_cached_only: ContextVar[bool | None] = ContextVar("row_cache_cached_only", default=None)


class NotCached(LookupError):
    """What a RowCache does not keep (or keeps past its time) was asked within cached_only().
    `kept`: of the keys asked together (RowCache.get_many), the values it does keep."""

    def __init__(self, name: str, kept: dict[Hashable, Any] | None = None) -> None:
        super().__init__(name)
        self.kept = kept or {}


@contextmanager
def cached_only(*, stale: bool = False) -> Iterator[None]:
    """Read every RowCache without loading: NotCached for what it does not keep. With
    `stale`, an entry past its time is read too (what it was when last loaded)."""
    token = _cached_only.set(stale)
    try:
        yield
    finally:
        _cached_only.reset(token)


def cached_only_reading() -> bool:
    """Whether this runs within cached_only(): nothing is loaded."""
    return _cached_only.get() is not None


def cached_only_stale() -> bool:
    """Whether this runs within cached_only(stale=True): what is read only tells whose a
    request is, never vouches for it."""
    return bool(_cached_only.get())


class RowCache(Generic[V]):
    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._entries: dict[Hashable, tuple[float, V]] = {}
        # Bumped by clear(): a load that started before a clear is not stored after it.
        self._generation = 0
        _all.append(self)

    def get(self, key: Hashable, load: Callable[[], V | None]) -> V | None:
        ttl = max(float(settings.QORVEN_ROUTE_CACHE_SECONDS), 0.0)
        stale = _cached_only.get()
        now = time.monotonic()
        if ttl or stale is not None:  # with no caching, nothing is read from it but within cached_only()
            hit = self._entries.get(key)
            if hit is not None and (hit[0] > now or stale):
                return hit[1]
            if stale is not None:
                raise NotCached(self.name)
        generation = self._generation
        value = load()
        if value is not None:
            self._keep({key: value}, now + ttl, generation)
        else:
            self._drop([key])
        return value

    def get_many(self, keys: Iterable[Hashable],
                 load: Callable[[list[Hashable]], dict[Hashable, V]]) -> dict[Hashable, V]:
        """The values of those of `keys` that have one, by key: what is kept, and the rest
        loaded with one call of `load` (given the keys not kept, it returns the values it
        found, by key). Within cached_only() nothing is loaded: a key not kept raises
        NotCached, whose `kept` holds the values of the others."""
        ttl = max(float(settings.QORVEN_ROUTE_CACHE_SECONDS), 0.0)
        stale = _cached_only.get()
        now = time.monotonic()
        kept: dict[Hashable, V] = {}
        missing: list[Hashable] = []
        for key in keys:
            hit = self._entries.get(key) if ttl or stale is not None else None
            if hit is not None and (hit[0] > now or stale):
                kept[key] = hit[1]
            else:
                missing.append(key)
        if not missing:
            return kept
        if stale is not None:
            raise NotCached(self.name, dict(kept))
        generation = self._generation
        loaded = load(missing)
        self._keep(loaded, now + ttl, generation)
        self._drop([key for key in missing if key not in loaded])
        return {**kept, **loaded}

    def fill(self, values: dict[Hashable, V]) -> None:
        """Keep these values as if each had just been loaded (a process warming its cache)."""
        self._keep(values, time.monotonic() + max(float(settings.QORVEN_ROUTE_CACHE_SECONDS), 0.0), self._generation)

    def _keep(self, values: dict[Hashable, V], until: float, generation: int) -> None:
        # With no caching (QORVEN_ROUTE_CACHE_SECONDS=0) `until` is now: the value is past
        # its time at once, read only within cached_only(stale=True).
        if not values:
            return
        with self._lock:
            if generation == self._generation:  # not a load that started before a clear
                if len(self._entries) + len(values) > _MAX_ENTRIES:
                    self._entries.clear()
                self._entries.update((key, (until, value)) for key, value in values.items())

    def _drop(self, keys: list[Hashable]) -> None:
        if any(key in self._entries for key in keys):
            with self._lock:
                for key in keys:
                    self._entries.pop(key, None)

    def forget_where(self, gone: Callable[[V], bool]) -> None:
        """Forget the entries whose value is `gone` (stale ones too); the rest are kept."""
        with self._lock:
            self._generation += 1  # a load under way may hold what is forgotten
            self._entries = {key: entry for key, entry in self._entries.items() if not gone(entry[1])}

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
