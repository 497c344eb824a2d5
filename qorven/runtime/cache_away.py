"""The cache (Redis, on the scale-out layout) away: whether an error is it being
unreachable — a transient failure, which a task waits out on the worker's timer, never
one that marks its item failed — and `cache_or`, for what the cache only spares work or
a call, done without it while it is away. A Redis that hangs is away at once for a short
rest after a call to it timed out (qorven.runtime.redis_rest), as one refusing is."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

from .repeated_failure import RepeatedFailure

CACHE_RETRY_DELAY = 2.0  # seconds before a task that found the cache away runs again

T = TypeVar("T")


def cache_unreachable(exc: BaseException) -> bool:
    # Redis' client is heavy to import: an error can only be one of its own once it is loaded.
    errors = sys.modules.get("redis.exceptions")
    return errors is not None and isinstance(exc, (errors.ConnectionError, errors.TimeoutError))


def cache_or(default: T, call: Callable[[], T], *, away: RepeatedFailure) -> T:
    """What `call` (a cache read or write) answers, or `default` when it fails: the cache
    is away. Any error counts, whichever the backend (the caller imports none of Redis').
    `away` is the place's own log of it: the first failure with its traceback, then a
    line a minute while it lasts, and one when a call succeeds again."""
    try:
        found = call()
    except Exception as exc:
        away.failed(type(exc).__name__)
        return default
    away.succeeded()
    return found
