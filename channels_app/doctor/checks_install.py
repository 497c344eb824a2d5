"""`qorven doctor`'s checks of the install: the database and its migrations, Redis, the
workers and the beat."""
from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connections

from .check import Check, guarded


NOT_MIGRATED = "migration(s) not applied"  # the database answers; its tables are to be made


def database_checks() -> Iterator[Check]:
    from django.db.migrations.executor import MigrationExecutor

    from qorven.runtime.database import connection_refusal

    fix = "check DATABASE_URL and that the database server is up"
    # Asked first outside the pool: its error would not say why, after 10 s of tries that
    # each log a warning above the report.
    refused = connection_refusal()
    if refused:
        yield Check("database", _database_named(), False, f"unreachable: {refused}", fix)
        return
    try:
        connection = connections["default"]
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        executor = MigrationExecutor(connection)  # loads the migration graph once
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as exc:
        yield Check("database", _database_named(), False, f"unreachable ({type(exc).__name__})", fix)
        return
    if plan:
        yield Check("database", _database_named(), False, f"{len(plan)} {NOT_MIGRATED}",
                    "run `qorven migrate`")
    else:
        yield Check("database", _database_named(), True, "reachable, every migration applied")


def _database_named() -> str:
    """Which database this is, so a host sees the one they meant is the one checked."""
    from qorven.runtime.database import database_named

    return database_named()


def redis_checks() -> Iterator[Check]:
    if not settings.REDIS_URL:
        return  # the embedded default needs none

    def probe() -> Check:
        import redis

        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2).ping()
        return Check("redis", _host(settings.REDIS_URL), True, "answers")

    yield guarded("redis", _host(settings.REDIS_URL), "check REDIS_URL and that Redis is up", probe)


def worker_checks() -> Iterator[Check]:
    from celery import current_app

    from qorven.runtime.worker import broker_is_embedded

    if broker_is_embedded(current_app):
        return  # tasks run inside `qorven serve`

    def probe() -> Check:
        replies = current_app.control.inspect(timeout=2.0).ping() or {}
        if not replies:
            return Check("workers", "celery", False, "no worker answered", "start one or more `qorven worker`")
        return Check("workers", "celery", True, f"{len(replies)} worker(s) answered: {', '.join(sorted(replies))}")

    # Raised: the broker could not be asked at all, and a worker started now would only
    # wait for it too.
    yield guarded("workers", "celery", "check CELERY_BROKER_URL (else REDIS_URL) and that Redis is up: "
                  "the workers are asked through it", probe)


def beat_checks() -> Iterator[Check]:
    from celery import current_app

    from heartbeats_app.liveness import ALIVE_FOR, beats_alive
    from qorven.runtime.worker import broker_is_embedded

    if broker_is_embedded(current_app) or not settings.REDIS_URL:
        return  # `qorven serve` fires heartbeats itself

    def probe() -> Check:
        running = beats_alive()
        if not running:
            return Check("beat", "celery beat", False, f"no `qorven beat` reported in the last {ALIVE_FOR} s",
                         "start exactly one `qorven beat`: without it no heartbeat runs")
        if len(running) > 1:
            return Check("beat", "celery beat", False, f"{len(running)} beats running: {', '.join(running)}",
                         "stop all but one `qorven beat` (each sends every due heartbeat)")
        return Check("beat", "celery beat", True, f"one beat running: {running[0]}")

    yield guarded("beat", "celery beat", "check REDIS_URL and that Redis is up: each beat reports itself there",
                  probe)


def _host(url: str) -> str:
    parts = urlsplit(url)
    return parts.hostname or url if parts.port is None else f"{parts.hostname}:{parts.port}"
