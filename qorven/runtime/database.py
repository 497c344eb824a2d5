"""A database connection lost under a task (a server restart, a failover, a backend
killed by an operator) is a transient failure like any other: the task drops the broken
connection and comes back shortly on a fresh one, instead of failing its work for good."""
from __future__ import annotations

import logging
import time
from typing import Any, TextIO

from django.db import InterfaceError, OperationalError, connections
from django.http import HttpRequest, HttpResponse, JsonResponse

logger = logging.getLogger(__name__)

# What a lost or refused connection raises through Django (psycopg's AdminShutdown and
# "the connection is closed" arrive as these).
DATABASE_DOWN = (OperationalError, InterfaceError)
DATABASE_RETRY_DELAY = 1.0  # seconds before a task whose connection was lost runs again
STARTUP_WAIT = 60.0  # seconds a starting server or beat waits for its database to take a connection


def database_named() -> str:
    """Which database this process uses, as a host recognises it: the SQLite file, or
    PostgreSQL's database and server (never the password). Said where a wrong one would
    otherwise go unseen: `qorven serve`'s start, `qorven doctor`, a command on a database
    not migrated."""
    connection = connections["default"]
    named = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"SQLite file {named['NAME']}"
    return f"PostgreSQL database {named['NAME']} on {named.get('HOST') or 'localhost'}:{named.get('PORT') or 5432}"


def connection_refusal() -> str:
    """Why PostgreSQL refuses this process a connection ("Connection refused", "password
    authentication failed for user …", "database … does not exist"), "" when it takes one
    or the database is SQLite. Asked on a connection of its own, outside the pool: the
    pool's error says only that it had none after 10 s, and its tries meanwhile each log
    a warning. libpq's words, which never quote the password."""
    import re

    connection = connections["default"]
    if connection.vendor != "postgresql":
        return ""
    import psycopg

    try:
        psycopg.connect(**{**connection.get_connection_params(), "connect_timeout": 5}).close()
    except psycopg.OperationalError as refused:
        first = (str(refused).strip().splitlines() or [type(refused).__name__])[0]
        # 'connection failed: connection to server at "127.0.0.1", port 9 failed: Connection refused'
        return re.sub(r'^(connection failed: )?connection to server at .*?, port \d+ failed: ', "", first).strip()
    except Exception:  # it cannot even be asked: the caller's own error is the one to show
        return ""
    return ""


def database_wait(stderr: TextIO, *, seconds: float = STARTUP_WAIT) -> None:
    """Return once the database takes a connection, saying once on `stderr` that it is
    waited for; after `seconds`, CommandError in one line. For `qorven serve` and `qorven
    beat` as they start: started with the database still coming up (a host rebooting, the
    three restarted together), they ended at their first query with a traceback and stayed
    down, while everything after their start rides out a database away."""
    from django.core.management.base import CommandError

    if connections["default"].vendor == "sqlite":
        return  # a file, not a server still coming up: waiting would not change what it says
    deadline = time.monotonic() + seconds
    said = False
    while True:
        connection = connections["default"]
        # Asked outside the pool first: the pool's error says only that it had none after
        # its timeout, and each of its tries meanwhile logs a warning.
        first = connection_refusal()
        try:
            if not first:
                connection.ensure_connection()
                return
        except DATABASE_DOWN as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            connection.close()
        if first:
            if time.monotonic() >= deadline:
                raise CommandError(f"the database ({database_named()}) did not take a connection "
                                   f"in {seconds:.0f} s: {first}") from None
            if not said:
                stderr.write(f"waiting for the database ({database_named()}): {first}\n")
                stderr.flush()
                said = True
            time.sleep(DATABASE_RETRY_DELAY)


def migration_recorded(db: Any, *, app: str, name: str) -> bool:
    """Whether migration `name` of `app` is recorded as applied on the connection `db`: a
    database check of what a migration creates finds nothing missing before it ran (an
    install upgraded from before it is checked by `qorven migrate` first)."""
    from django.db.migrations.recorder import MigrationRecorder

    recorder = MigrationRecorder(db)
    return recorder.has_table() and recorder.migration_qs.filter(app=app, name=name).exists()


def connections_drop_broken() -> None:
    """Close this thread's connections that a database error left unusable, so the next
    query opens (or borrows from the pool) a working one. Healthy ones are kept.

    What ended one connection (a restart, a failover) has usually ended the pool's idle
    ones too, and each would be lent to the next request in turn and fail it: so once a
    pooled connection is found broken, the pool checks its idle ones and replaces the dead.
    (Checking every connection as it is lent, Django's CONN_HEALTH_CHECKS, costs a round
    trip per request and stalled under connections killed every 0.4 s: docs/reliability.md.)
    """
    for conn in connections.all(initialized_only=True):
        if conn.connection is None or conn.in_atomic_block or not conn.errors_occurred:
            continue
        if not conn.is_usable():
            conn.close()
            pool = getattr(conn, "pool", None)  # PostgreSQL with QORVEN_DB_POOL
            if pool is not None:
                pool.check()
        else:
            conn.errors_occurred = False


DATABASE_DOWN_NOTICE = "the database is unavailable; try again in a moment"
DATABASE_DOWN_CODE = "database_unavailable"  # its 503's "code": told apart from a proxy's 503 or the cache away's


def database_down_response() -> JsonResponse:
    """503 with Retry-After: what a client (a platform, the page, the terminal) is told
    when its request met a lost connection; it sends it again, and nothing was stored. Its
    "code" tells it from another 503 (a proxy's, the cache away's) without the notice's words."""
    response = JsonResponse({"error": DATABASE_DOWN_NOTICE, "code": DATABASE_DOWN_CODE}, status=503)
    response["Retry-After"] = "1"
    return response


class DatabaseDownMiddleware:
    """A view whose connection was lost under it is answered 503 (database_down_response),
    not 500, and the broken connection is dropped so the next request gets a working one."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, DATABASE_DOWN):
            return None
        logger.warning("%s %s: the database connection was lost (%s); answered 503",
                       request.method, request.path, type(exception).__name__)
        connections_drop_broken()
        return database_down_response()
