"""How long a model route still waits after failing, shared by every process through the
cache (Redis with REDIS_URL; the process's own memory on the embedded default).

A route that failed cools down for FIRST seconds, doubling with each failure in a row up to
LONGEST (or longer when the server asked for it with Retry-After). The record outlives the
wait, so a failure soon after it doubles the next one; an answer clears it.

A cooldown is the server's (the server and model, for everyone calling them: it is down)
or one API key's on it (`key`: that key was rate-limited, refused or is out of quota;
routes of other keys go on). Which one is qorven.llm.failover's choice.

A cooldown spares a route known to be failing; it is not needed to call one. With the
cache away (Redis down), a route's cooldown reads as none (the route is tried) and one
that cannot be written or cleared is not kept: the model call goes on as if there were
no cooldowns, and the log says so once while it lasts (no key, no route in it). A
route's state as the admin and /status show it is then unknown (STATE_UNKNOWN), not
"ready".
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache

from .cache_away import cache_or
from .repeated_failure import RepeatedFailure

logger = logging.getLogger(__name__)

STATE_UNKNOWN = "unknown: the cache is away"  # a route's state when its cooldown cannot be read
FIRST = 60.0  # seconds
LONGEST = 3600.0

_cache_failures = RepeatedFailure(logger, "model route cooldowns cannot be read or kept in the cache; "
                                          "routes are tried as not cooling down")


@dataclass(frozen=True)
class Cooldown:
    until: float  # time.time() when the route is tried again
    failures: int  # in a row
    kind: str = "unreachable"  # how it failed the last time (qorven.llm.errors' kinds)

    @property
    def remaining(self) -> float:
        return max(self.until - time.time(), 0.0)

    def describe(self) -> str:
        if self.remaining <= 0:
            return "ready"
        return f"cooling down for {self.remaining:.0f} s after {self.failures} failure(s) in a row"


def _key(base_url: str, model: str, key: str = "") -> str:
    # A JSON array, not the parts joined with a separator: a base URL or a model (a
    # workspace admin's to set) holding it would name another route's cooldown.
    route = json.dumps([base_url.strip().rstrip("/"), model, key])
    digest = hashlib.sha256(route.encode()).hexdigest()[:32]
    return f"model-route-cooldown:v2:{digest}"


def cooldown_get(*, base_url: str, model: str, key: str = "") -> Cooldown | None:
    """The route's cooldown, if it failed the last time it was called (also once the wait
    has passed). With `key`: the cooldown of that API key on the route only (a refusal
    of the key, such as a revoked one, its spent quota or its rate limit, says nothing of
    other keys)."""
    return _cooldown_read(base_url, model, key)[1]


def _cooldown_read(base_url: str, model: str, key: str = "") -> tuple[bool, Cooldown | None]:
    """(whether the cache could be read, the route's cooldown)."""
    read, found = cache_or((False, None), lambda: (True, cache.get(_key(base_url, model, key))),
                           away=_cache_failures)
    return read, Cooldown(*found) if isinstance(found, (list, tuple)) and len(found) in (2, 3) else None


def cooldown_start(*, base_url: str, model: str, retry_after: float | None = None,
                   kind: str = "unreachable", key: str = "") -> Cooldown | None:
    """The route's new cooldown (with `key`: that key's on it), or None when the cache
    could not keep it (away): the route is not cooled down."""
    before = cooldown_get(base_url=base_url, model=model, key=key)
    failures = (before.failures if before else 0) + 1
    seconds = min(FIRST * 2 ** (failures - 1), LONGEST)
    if retry_after:
        seconds = max(seconds, min(retry_after, LONGEST))
    cooldown = Cooldown(until=time.time() + seconds, failures=failures, kind=kind)
    kept = cache_or(False, lambda: _kept(_key(base_url, model, key), (cooldown.until, failures, kind),
                                         timeout=int(seconds + LONGEST)), away=_cache_failures)
    return cooldown if kept else None


def cooldown_clear(*, base_url: str, model: str, key: str = "") -> None:
    cache_or(None, lambda: cache.delete(_key(base_url, model, key)), away=_cache_failures)


def _kept(key: str, value: Any, *, timeout: int) -> bool:
    """cache.set, saying it kept the value (cache.set answers None)."""
    cache.set(key, value, timeout=timeout)
    return True


def cooldown_longest(*, base_url: str, model: str, key: str = "") -> Cooldown | None:
    """The route's cooldown: the server's (down), or its key's (rate-limited, refused, out
    of quota), whichever lasts longer."""
    found = [c for c in (cooldown_get(base_url=base_url, model=model),
                         cooldown_get(base_url=base_url, model=model, key=key) if key else None) if c is not None]
    return max(found, key=lambda c: c.until) if found else None


def route_state(*, base_url: str, model: str, key: str = "") -> str:
    """'ready', or how long the route (with `key`: and that key on it) still cools down;
    STATE_UNKNOWN when the cache cannot be read (a route may be cooling down unseen)."""
    reads = [_cooldown_read(base_url, model)] + ([_cooldown_read(base_url, model, key)] if key else [])
    if not all(read for read, _ in reads):
        return STATE_UNKNOWN
    found = [c for _, c in reads if c is not None]
    return max(found, key=lambda c: c.until).describe() if found else "ready"
