"""Loaded first (`-p tests.isolated_env` in pytest's options), before Django's settings:
the suite reads no `.env` and none of the developer's model, platform or Qorven settings,
so `make test` never calls a real model server or platform with a real key. The database
and Redis of the run (DATABASE_URL, REDIS_URL, DJANGO_SECRET_KEY, as CI sets them) are
kept; processes the tests start inherit this environment."""
from __future__ import annotations

import os
import uuid

KEPT = {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"}
SCRUBBED_PREFIXES = ("OPENAI_", "QORVEN_", "CELERY_", "DJANGO_")
SCRUBBED_SUFFIXES = ("_API_BASE",)  # TELEGRAM_API_BASE, SLACK_API_BASE, …


def _scrub() -> None:
    for name in list(os.environ):
        if name in KEPT:
            continue
        if name.startswith(SCRUBBED_PREFIXES) or name.endswith(SCRUBBED_SUFFIXES):
            del os.environ[name]
    os.environ["QORVEN_ENV_FILE"] = ""  # no .env either (qorven.settings)
    # Live groups of its own in Redis, for this run and the processes it starts: a group
    # membership an earlier run left (channels_redis keeps them a day) is not this run's,
    # though its database hands out the same session ids again.
    os.environ["QORVEN_LIVE_PREFIX"] = f"asgi-test-{uuid.uuid4().hex[:8]}"


_scrub()
