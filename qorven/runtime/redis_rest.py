"""A Redis that hangs, rested: once a command to it (or connecting to it) waited out
QORVEN_REDIS_TIMEOUT, every call of the process to that server is refused at once for
CACHE_REST seconds (CacheResting, one of redis' ConnectionErrors), as a Redis refusing
connections fails at once; then the next call tries it again.

Without it, a Redis that takes connections and never answers costs the timeout at each
call: a turn touches the cache several times (its stop flag, the route's slots, the
session's waiter marker, the stream buffer…), and every turn, webhook and send of the
process pays it again. Every call already has its way without the cache (the cache
away: qorven.runtime.cache_away), which the rest only takes sooner.

`RestingPool` is the connection pool of the cache (CACHES' `pool_class`) and of the
process's own client (qorven.runtime.redis_client), both on REDIS_URL: a timeout in
either rests both. Not the live layer's nor the broker's, which keep their own."""
from __future__ import annotations

import functools
import threading
import time
from collections.abc import Mapping
from typing import Any

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# Seconds a server that timed out is left alone. Short: the first call after it finds out
# whether it answers again, and one call in that many seconds waits out the timeout.
CACHE_REST = 2.0

_resting_until: dict[str, float] = {}  # server → time.monotonic() its rest ends
_lock = threading.Lock()


class CacheResting(RedisConnectionError):
    """A call not sent: its server timed out less than CACHE_REST seconds ago."""


def _server(kwargs: Mapping[str, Any]) -> str:
    """The server a connection's (or a pool's) arguments point at."""
    return kwargs.get("path") or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def _rest(server: str) -> None:
    with _lock:
        _resting_until[server] = time.monotonic() + CACHE_REST


def resting(server: str) -> bool:
    # A read of one dict entry needs no lock: a rest set a moment ago by another thread is
    # found by the next call.
    return time.monotonic() < _resting_until.get(server, 0.0)


def rests_forget() -> None:
    """End every rest (a process starting has none; for tests)."""
    with _lock:
        _resting_until.clear()


class _RestsOnTimeout:
    """Mixed into the pool's connection class: a timeout, connecting or reading a reply,
    rests its server."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rest_server = _server(kwargs)

    def connect(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().connect(*args, **kwargs)  # type: ignore[misc]
        except RedisTimeoutError:
            _rest(self._rest_server)
            raise

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)  # type: ignore[misc]
        except RedisTimeoutError:
            _rest(self._rest_server)
            raise


@functools.cache
def _resting_class(connection_class: type) -> type:
    return type(f"Resting{connection_class.__name__}", (_RestsOnTimeout, connection_class), {})


class RestingPool(redis.ConnectionPool):
    """redis' pool, whose connections rest their server on a timeout, and which hands out
    none while it rests."""

    def __init__(self, connection_class: type = redis.Connection, **kwargs: Any) -> None:
        # The class the URL chose (TLS, a Unix socket) is kept, only made to rest.
        super().__init__(connection_class=_resting_class(connection_class), **kwargs)
        self._rest_server = _server(self.connection_kwargs)

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if resting(self._rest_server):
            raise CacheResting(f"Redis at {self._rest_server} timed out less than {CACHE_REST:g} s ago")
        return super().get_connection(*args, **kwargs)
