"""The model servers' single slot queues of before the per-tenant lanes
(`route-slots:<name>:queue`, lists with no expiry that nothing reads since) are removed once
when a process starts, on a Redis of the test's own; the lanes and the holders stay."""
from __future__ import annotations

import io

import pytest

from qorven.runtime.redis_client import install_key, shared_redis
from qorven.runtime.route_slots import _name
from qorven.runtime.startup import Startup, startup_run

from ..reliability.layout import RedisOfOurOwn


@pytest.fixture
def own_redis(settings):
    redis = RedisOfOurOwn()
    settings.REDIS_URL = redis.url
    yield shared_redis()
    redis.stop()


def _start() -> str:
    err = io.StringIO()
    startup_run(Startup(process="worker", stdout=io.StringIO(), stderr=err, embedded=False), after_worker=False)
    return err.getvalue()


def test_the_single_queues_of_before_the_lanes_are_removed_once_at_a_processs_start(own_redis):
    old, in_use, kept = (install_key(f"route-slots:{_name(url)}:") for url in
                         ("http://old:8080/v1", "http://in-use:8080/v1", "http://lanes:8080/v1"))
    own_redis.rpush(old + "queue", "w1", "w2")  # their waiters long gone
    own_redis.rpush(in_use + "queue", "gone", "here")
    own_redis.set(in_use + "waiting:here", 1, ex=30)  # a process of the old code still waits in it
    own_redis.rpush(kept + "queue:7", "ticket")  # a lane
    own_redis.rpush(kept + "rotation", "7")
    own_redis.zadd(kept + "holders", {"h": 1e12})

    assert "not removed" not in _start()
    assert not own_redis.exists(old + "queue")
    assert own_redis.lrange(in_use + "queue", 0, -1) == [b"gone", b"here"]
    assert own_redis.lrange(kept + "queue:7", 0, -1) == [b"ticket"]
    assert own_redis.exists(kept + "rotation") and own_redis.exists(kept + "holders")

    own_redis.delete(in_use + "waiting:here")  # that process has stopped
    _start()
    assert not own_redis.exists(in_use + "queue")

    own_redis.rpush(old + "queue", "w3")  # once done, a start reads one key, not the keyspace
    _start()
    assert own_redis.exists(old + "queue")
