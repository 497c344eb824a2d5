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
_made_for = ""
_lock = threading.Lock()


def shared_redis() -> Any:
    """The client for REDIS_URL (made again if the setting changed, as tests change it)."""
    global _client, _made_for
    url = settings.REDIS_URL
    if _client is None or _made_for != url:
        with _lock:
            if _client is None or _made_for != url:
                import redis

                _client, _made_for = redis.Redis.from_url(url), url
    return _client


def install_key(name: str) -> str:
    """`name` under this install's QORVEN_CACHE_PREFIX: installs sharing one Redis database
    keep their keys apart, as the cache's and the live layer's are."""
    return f"{settings.QORVEN_CACHE_PREFIX}:{name}"
