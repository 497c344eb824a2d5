"""Loaded first (`-p tests.isolated_env` in pytest's options), before Django's settings:
the suite reads no `.env` and none of the developer's model, platform, proxy or Qorven settings,
so `make test` never calls a real model server or platform with a real key. The database
and Redis of the run (DATABASE_URL, REDIS_URL, DJANGO_SECRET_KEY, as CI sets them) are
kept; processes the tests start inherit this environment.

Under pytest-xdist each worker process (gw0, gw1, …) runs on a Redis database of its own
(the run's database number plus the worker's): Celery's queues, the cache (leases,
cooldowns, the beat's liveness key) and the live layer of one worker's tests are then
never read by another's. pytest-django gives each worker a test database of its own."""
from __future__ import annotations

import os
import re
import uuid
from collections.abc import MutableMapping

KEPT = {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"}
SCRUBBED_PREFIXES = ("OPENAI_", "QORVEN_", "CELERY_", "DJANGO_")
SCRUBBED_SUFFIXES = ("_API_BASE",)  # TELEGRAM_API_BASE, SLACK_API_BASE, …
# The suite's servers listen on loopback: a developer's outbound proxy, which the host's
# own clients follow, would get (and refuse) every request to them.
SCRUBBED_PROXIES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def _scrub(environ: MutableMapping[str, str] = os.environ) -> None:
    for name in list(environ):
        if name in KEPT:
            continue
        if name.startswith(SCRUBBED_PREFIXES) or name.endswith(SCRUBBED_SUFFIXES) or name.lower() in SCRUBBED_PROXIES:
            del environ[name]
    environ["QORVEN_ENV_FILE"] = ""  # no .env either (qorven.settings)
    # Live groups of its own in Redis, for this run and the processes it starts: a group
    # membership an earlier run left (channels_redis keeps them a day) is not this run's,
    # though its database hands out the same session ids again.
    # So is the cache's: the servers a test starts count webchat visitors per address in
    # it, and an earlier run's count (10 an hour) refused this run's visitors.
    run = uuid.uuid4().hex[:8]
    environ["QORVEN_LIVE_PREFIX"] = f"asgi-test-{run}"
    environ["QORVEN_CACHE_PREFIX"] = f"qorven-test-{run}"


def _redis_of_this_worker(environ: MutableMapping[str, str] = os.environ) -> None:
    worker = environ.get("PYTEST_XDIST_WORKER", "")  # set by xdist before our options load
    url = environ.get("REDIS_URL", "")
    if not worker.startswith("gw") or not url:
        return
    match = re.fullmatch(r"(redis://[^/?#]+)(?:/(\d*))?(.*)", url)
    if match is None:
        raise RuntimeError(f"REDIS_URL {url!r} is not a redis:// address a test worker can number")
    base, db, rest = match.groups()
    environ["REDIS_URL"] = f"{base}/{int(db or 0) + int(worker[2:])}{rest}"


_scrub()
_redis_of_this_worker()
