"""The Redis broker's transport: kombu's own, except that a channel whose broker
connection is gone fails as a lost connection, not with AttributeError.

When Redis restarts under a running worker, Celery's consumer drops its broker
connection and reconnects. Work on the old connection's channel can still come after
that: closing the channel hands back the messages it delivered, and a task that was
running acknowledges its message when it ends. kombu builds a new Redis client for either
from the channel's connection, which is gone by then, and raised AttributeError; Celery
counts only connection and channel errors as survivable, so the worker's main process
stopped with "Unrecoverable error" and nothing was answered until a supervisor started it
again. `tests/reliability/test_redis_restart.py` at full size (`make stress`) failed that
way three runs in four; with this, six of six passed, the lost connection raised here eight
times in them.

Raised as a lost connection instead, both are what Celery already survives: the hand-back
is skipped and the acknowledgement is logged as failed. Nothing is lost or done twice by
it: kombu keeps each delivered message in Redis until it is acknowledged and delivers again
those left longer than the visibility timeout (CELERY_BROKER_TRANSPORT_OPTIONS), and every
task is safe to run twice (a turn answers only what is pending; a send is recorded once).
"""
from __future__ import annotations

from typing import Any

from kombu.transport import redis
from redis.exceptions import ConnectionError as RedisConnectionError

# What a redis:// broker URL names (registered in qorven.runtime.broker_transports).


class Channel(redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection is None or getattr(self.connection, "client", None) is None:
            raise RedisConnectionError("this channel's broker connection was closed")
        return super()._connparams(asynchronous=asynchronous)


class Transport(redis.Transport):
    Channel = Channel
