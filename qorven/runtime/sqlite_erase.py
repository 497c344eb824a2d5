"""What is deleted on the embedded default leaves the SQLite file.

Deleting a row is not enough there. SQLite keeps a deleted row's bytes in its page (and a
freed page whole) unless `secure_delete` is on: settings.py turns it on for every
connection (Debian's build has it on already; others do not). And an FTS5 index does not
remove a deleted row's words: it appends a delete marker that holds them once more, and
only a merge of every segment drops both. FTS5's own 'secure-delete' option would do that
at each delete, but needs SQLite 3.44 and Debian 12's Python has 3.40. So after a deletion
meant to erase (clear-memory, retention, a person, workspace or Qor deleted), the indexes
it touched are merged whole ('optimize'). That costs time in proportion to the index
(about a second per 300,000 messages here), paid by the deletion, never by an append; an
index with nothing to merge returns at once, so repeating it is free.
"""
from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.db.models import Model

__all__ = ["SettleOnOwnerDelete", "fulltext_settle", "wal_truncate"]


def fulltext_settle(*tables: str) -> None:
    """Merge these FTS5 tables whole once the current transaction commits (at once outside
    one), so no word of a deleted row stays in their blocks. SQLite only."""
    if connection.vendor != "sqlite" or not tables:
        return

    def settle() -> None:
        with connection.cursor() as cursor:
            for table in tables:
                cursor.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")

    transaction.on_commit(settle)


# How long emptying the write-ahead log waits for readers of an older snapshot. While it
# waits it holds the write lock, so every writer waits too: a download (one read snapshot,
# qorven.runtime.read_snapshot) can read for minutes, and the connection's own 30 s busy
# timeout would hold up the whole server for all of it.
WAL_TRUNCATE_WAIT_MS = 2_000


def wal_truncate() -> bool:
    """Copy the write-ahead log into the database file and empty it, so the page versions
    from before a deletion are gone from the -wal file too. It waits for readers up to
    WAL_TRUNCATE_WAIT_MS; returns False when one was still in the way, or when called
    inside a transaction (it cannot run there). SQLite only."""
    if connection.vendor != "sqlite":
        return True
    if connection.in_atomic_block:
        return False
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        (wait,) = cursor.fetchone()
        cursor.execute(f"PRAGMA busy_timeout = {min(int(wait), WAL_TRUNCATE_WAIT_MS)}")
        try:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            busy, _, _ = cursor.fetchone()
        finally:
            cursor.execute(f"PRAGMA busy_timeout = {int(wait)}")
    return not busy


class SettleOnOwnerDelete:
    """Settles an FTS5 table after a person, a workspace or a Qor is deleted: their rows go
    by database cascade (the admin deletes them, through no service of ours), which fires
    the index's delete trigger but merges nothing. Connected from the owning app's ready()."""

    def __init__(self, table: str, uid: str) -> None:
        self.table, self.uid = table, uid

    def connect(self, *owners: type[Model]) -> None:
        from django.db.models.signals import post_delete

        for model in owners:
            post_delete.connect(self, sender=model, dispatch_uid=f"{self.uid}.{model._meta.label_lower}")

    def __call__(self, sender: Any, **kwargs: Any) -> None:
        fulltext_settle(self.table)
