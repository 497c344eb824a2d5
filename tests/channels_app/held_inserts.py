"""Another connection holding the lock an INSERT of a webhook's message waits for (a
database slow to answer): the storing thread waits at its INSERT until it is let go."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection, connections


@contextmanager
def inserts_held(*, commit: bool = False) -> Iterator[Any]:
    """The lock held while in the block; the holding connection's cursor is given, for what
    another process would write meanwhile (kept with `commit`, else rolled back)."""
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            if connection.vendor == "postgresql":
                other.set_autocommit(False)
                cursor.execute("LOCK TABLE channels_app_inboundevent IN EXCLUSIVE MODE")
            else:
                cursor.execute("BEGIN IMMEDIATE")  # SQLite's write lock
            try:
                yield cursor
            finally:
                if connection.vendor == "postgresql":
                    (other.commit if commit else other.rollback)()
                else:
                    cursor.execute("COMMIT" if commit else "ROLLBACK")
    finally:
        other.close()
