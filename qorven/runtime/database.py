"""A database connection lost under a task (a server restart, a failover, a backend
killed by an operator) is a transient failure like any other: the task drops the broken
connection and comes back shortly on a fresh one, instead of failing its work for good."""
from __future__ import annotations

from django.db import InterfaceError, OperationalError, connections

# What a lost or refused connection raises through Django (psycopg's AdminShutdown and
# "the connection is closed" arrive as these).
DATABASE_DOWN = (OperationalError, InterfaceError)
DATABASE_RETRY_DELAY = 1.0  # seconds before a task whose connection was lost runs again


def connections_drop_broken() -> None:
    """Close this thread's connections that a database error left unusable, so the next
    query opens (or borrows from the pool) a working one. Healthy ones are kept."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is None or conn.in_atomic_block or not conn.errors_occurred:
            continue
        if not conn.is_usable():
            conn.close()
        else:
            conn.errors_occurred = False
