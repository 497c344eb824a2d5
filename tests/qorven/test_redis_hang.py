"""A Redis that takes connections and never answers (a paused machine: the server of the
test's own, stopped) or that never takes them (a listener whose backlog is full, as a host
whose packets are dropped) is away after QORVEN_REDIS_TIMEOUT, as one refusing connections
is: no call through the cache, the process's own client or the broker waits on it for
longer.

Before, neither client had a timeout of ours: redis-py 8 gives up after its own 5 s on
every command, and the older ones this install allows (redis>=5) never did, so every turn,
webhook and send that touched the cache waited for as long as Redis hung."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qorven.runtime.cache_away import cache_unreachable
from qorven.runtime.redis_client import install_key, shared_redis
from qorven.runtime.redis_rest import rests_forget

from ..processes import HungRedis

ROOT = Path(__file__).resolve().parents[2]
# What a call may take with QORVEN_REDIS_TIMEOUT at HungRedis.TIMEOUT (0.5 s), all included.
WITHIN = 2.5


def _ended_within(seconds: float, call: Callable[[], Any]) -> dict[str, Any]:
    """What `call` answered or raised, run on a thread of its own; it must have ended
    within `seconds` (the thread is left behind if not: the test's Redis answers at its end)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["answer"] = call()
        except Exception as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting on Redis after {seconds} s"
    box["took"] = time.monotonic() - started
    return box


def test_a_call_of_the_processes_client_to_a_redis_that_hangs_is_away_after_the_timeout(hung_redis):
    key = install_key("hang-probe")
    shared_redis().set(key, "1")  # its connection made while Redis answered
    hung_redis.hang()
    ended = _ended_within(WITHIN, lambda: shared_redis().get(key))
    assert cache_unreachable(ended["error"])  # what the callers already treat as the cache away
    hung_redis.answer()
    rests_forget()  # the rest its timeout began (the last test here)
    assert shared_redis().get(key) == b"1"  # and back as soon as it answers again


def test_connecting_the_processes_client_to_a_redis_that_never_takes_it_is_away_after_the_timeout(
    settings, black_hole
):
    settings.REDIS_URL = f"redis://127.0.0.1:{black_hole}/0"
    settings.QORVEN_REDIS_TIMEOUT = HungRedis.TIMEOUT
    ended = _ended_within(WITHIN, lambda: shared_redis().ping())
    assert cache_unreachable(ended["error"])


_CACHE_PROBE = """
import logging, os, signal, time
import django
django.setup()
from django.core.cache import cache
from qorven.runtime.cache_away import cache_or
from qorven.runtime.repeated_failure import RepeatedFailure
cache.set("hang-probe", "stored")
print(cache.get("hang-probe"))
os.kill(int(os.environ["HANG_PID"]), signal.SIGSTOP)
started = time.monotonic()
print(cache_or("away", lambda: cache.get("hang-probe"), away=RepeatedFailure(logging.getLogger("probe"), "probe")))
print(round(time.monotonic() - started, 1))
"""


def test_the_cache_the_settings_make_on_a_redis_that_hangs_is_away_after_the_timeout(hung_redis):
    """The settings' own CACHES (a process of its own, REDIS_URL and QORVEN_REDIS_TIMEOUT in
    its environment): a read is answered as the cache away, within the timeout."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "qorven.settings", "REDIS_URL": hung_redis.url,
           "QORVEN_REDIS_TIMEOUT": str(HungRedis.TIMEOUT), "HANG_PID": str(hung_redis.proc.pid)}
    done = subprocess.run([sys.executable, "-c", _CACHE_PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    stored, answer, took = done.stdout.split()
    assert (stored, answer) == ("stored", "away")
    assert float(took) < WITHIN - 1  # the timeout (0.5 s), not redis-py's 5 s or for ever


_PUBLISH_PROBE = """
import os, signal, time
import django
django.setup()
from qorven.celery import app
app.send_task("qorven.hang_probe", queue="qorven-hang-probe")  # its connection made while Redis answered
os.kill(int(os.environ["HANG_PID"]), signal.SIGSTOP)
started = time.monotonic()
try:
    app.send_task("qorven.hang_probe", queue="qorven-hang-probe")
except Exception as exc:
    print(type(exc).__name__)
print(round(time.monotonic() - started, 1))
"""


def test_a_task_published_to_a_broker_that_hangs_is_refused_after_the_timeout(hung_redis):
    """As when Redis refuses it: the caller's publish raises (and is tried again later:
    qorven.runtime.publish), after Celery's own tries of it (four), each bounded by
    QORVEN_REDIS_TIMEOUT. Before, kombu's Redis transport sets no timeout of its own (not even
    redis-py 8's 5 s): the publish, and the request or task making it, waited for ever."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "qorven.settings", "REDIS_URL": hung_redis.url,
           "QORVEN_REDIS_TIMEOUT": str(HungRedis.TIMEOUT), "HANG_PID": str(hung_redis.proc.pid)}
    env.pop("CELERY_BROKER_URL", None)
    try:
        done = subprocess.run([sys.executable, "-c", _PUBLISH_PROBE], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError("the publish still waited on the broker after 30 s") from None
    assert done.returncode == 0, done.stderr[-2000:]
    refused, took = done.stdout.split()
    assert refused == "OperationalError"  # kombu's, as for a Redis refusing the connection
    assert float(took) < 10


def test_after_a_call_to_a_redis_that_hangs_timed_out_the_calls_to_it_fail_at_once_until_its_rest_is_over(
    hung_redis,
):
    """One timeout rests that Redis for both the process's client and the cache: their
    calls meanwhile are not sent (CacheResting, which the callers take as the cache away,
    as a refused connection), and the first after the rest is. Before, each call waited
    out the timeout again."""
    from django.core.cache import cache

    from qorven.runtime.redis_rest import CACHE_REST, CacheResting

    from ..processes import wait_for

    key = install_key("hang-probe")
    shared_redis().set(key, "1")
    cache.set("hang-probe", "stored")
    hung_redis.hang()
    assert cache_unreachable(_ended_within(WITHIN, lambda: shared_redis().get(key))["error"])
    for call in (lambda: shared_redis().get(key), lambda: cache.get("hang-probe")):
        error = _ended_within(WITHIN, call)["error"]
        assert isinstance(error, CacheResting) and cache_unreachable(error)
    hung_redis.answer()

    def answered() -> bool:
        try:
            return shared_redis().get(key) == b"1" and cache.get("hang-probe") == "stored"
        except CacheResting:
            return False

    assert wait_for(answered, CACHE_REST + 5, step=0.1)
