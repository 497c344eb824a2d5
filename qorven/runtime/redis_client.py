"""The process's one Redis client for Qorven's own keys (route slots, the stream buffer),
beside the cache, the live layer and the broker, which keep their own connections.

One client with its connection pool per process, made at first use: redis-py's pool is
safe across threads and starts afresh in a forked child. Django's RedisCache has a client
too, but only behind a private attribute, and what it stores is pickled."""
from __future__ import annotations

import threading
from typing import Any

from django.conf import settings

_client: Any = None
_made_for: tuple[str, float] = ("", 0.0)
_lock = threading.Lock()


def shared_redis() -> Any:
    """The client for REDIS_URL, each command and connecting bounded by QORVEN_REDIS_TIMEOUT
    (a Redis that hangs then raises redis' TimeoutError, which counts as the cache away:
    qorven.runtime.cache_away), its calls refused at once for a while after one timed out
    (qorven.runtime.redis_rest, as the cache's). Made again if either setting changed, as
    tests change them."""
    global _client, _made_for
    made_for = (settings.REDIS_URL, settings.QORVEN_REDIS_TIMEOUT)
    if _client is None or _made_for != made_for:
        with _lock:
            if _client is None or _made_for != made_for:
                import redis

                from .redis_rest import RestingPool

                url, timeout = made_for
                pool = RestingPool.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
                _client = redis.Redis(connection_pool=pool)
                _made_for = made_for
    return _client


def install_key(name: str) -> str:
    """`name` under this install's QORVEN_CACHE_PREFIX: installs sharing one Redis database
    keep their keys apart, as the cache's and the live layer's are."""
    return f"{settings.QORVEN_CACHE_PREFIX}:{name}"
