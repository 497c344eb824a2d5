"""Whether an error is the cache (Redis, on the scale-out layout) being unreachable: a
transient failure, which a task waits out on the worker's timer, never one that marks
its item failed."""
from __future__ import annotations

import sys

CACHE_RETRY_DELAY = 2.0  # seconds before a task that found the cache away runs again


def cache_unreachable(exc: BaseException) -> bool:
    # Redis' client is heavy to import: an error can only be one of its own once it is loaded.
    errors = sys.modules.get("redis.exceptions")
    return errors is not None and isinstance(exc, (errors.ConnectionError, errors.TimeoutError))
