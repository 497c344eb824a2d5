"""A mark in the cache that some work is running (one summarizer per session), held as a
lease: short, renewed while the work runs, gone soon after a process that died holding it.

A mark set for as long as the work could possibly take, and deleted when it ends, stays
behind when its worker is killed outright (SIGKILL, out of memory): everything after it
was kept away for that long. A lease is set for a few seconds and renewed every third of
them by one keeper thread per process, so it outlives its worker by at most that.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.cache import cache

from .cache_away import cache_or
from .repeated_failure import RepeatedFailure

logger = logging.getLogger(__name__)
_release_away = RepeatedFailure(logger, "a cache lease cannot be given back with the cache away; "
                                        "it runs out by itself")
# The keeper tries every third of a lease while the cache is away: one line, not one a try.
_renew_failures = RepeatedFailure(logger, "could not renew cache leases")


class _Keeper:
    """Renews the cache leases this process holds, on one daemon thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}  # key → seconds
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._every = 0.0  # seconds the thread waits now between renewals

    def hold(self, key: str, seconds: int) -> None:
        with self._lock:
            self._held[key] = seconds
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="qorven-cache-leases", daemon=True)
                self._thread.start()
            elif seconds / 3 < self._every:
                self._wake.set()  # a shorter lease than the wait under way: it would run out first

    def drop(self, key: str) -> None:
        with self._lock:
            self._held.pop(key, None)

    def renew(self) -> None:
        """Renew every lease held now. A lease that ran out meanwhile (a stall) is set
        again: a second run beside this one is harmless, while the mark is for skipping."""
        with self._lock:
            held = dict(self._held)
        for key, seconds in held.items():
            if not cache.touch(key, seconds):
                cache.add(key, 1, timeout=seconds)

    def _run(self) -> None:
        while True:
            with self._lock:
                self._every = max(min(self._held.values(), default=3) / 3, 0.1)
            self._wake.wait(self._every)
            self._wake.clear()
            with self._lock:
                if not self._held:
                    continue  # nothing tried: no news of the cache either way
            try:
                self.renew()
            except Exception as exc:
                _renew_failures.failed(type(exc).__name__)
            else:
                _renew_failures.succeeded()


_keeper = _Keeper()


@contextmanager
def cache_lease(key: str, *, seconds: int) -> Iterator[bool]:
    """Hold `key` for `seconds`, renewed while the block runs; yields False (and holds
    nothing) when another holds it. The key is deleted when the block ends — or, the
    cache gone away meanwhile, runs out within `seconds`: the work the block did stands."""
    if not cache.add(key, 1, timeout=seconds):
        yield False
        return
    _keeper.hold(key, seconds)
    try:
        yield True
    finally:
        _keeper.drop(key)
        cache_or(None, lambda: cache.delete(key), away=_release_away)
