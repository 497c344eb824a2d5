"""The test database away, as a restart or a failover takes it: on PostgreSQL only (a
SQLite file does not go away)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def database_away() -> Iterator[None]:
    """What a restart does to every thread and process but the test's own thread: the test
    database ends its connections (the pool's idle ones with the rest) and refuses new ones
    (the superuser's too) while the block runs."""
    import psycopg

    db = connection.settings_dict
    admin = dict(dbname="postgres", user=db["USER"], password=db.get("PASSWORD") or None,
                 host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, autocommit=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        ours = cursor.fetchone()[0]

    def allow(allowed: bool) -> None:
        with psycopg.connect(**admin) as conn:
            conn.execute(f'ALTER DATABASE "{db["NAME"]}" WITH ALLOW_CONNECTIONS {str(allowed).lower()}')
            if not allowed:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s"
                             " AND pid <> %s", [db["NAME"], ours])

    allow(False)
    try:
        yield
    finally:
        allow(True)
