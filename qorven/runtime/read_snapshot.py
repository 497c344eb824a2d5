"""One moment of the database for a read made of many queries (a person's export), while
the service goes on writing: every query in it sees what was committed when it began,
nothing committed after, and no writer waits for it.

- PostgreSQL: a REPEATABLE READ, READ ONLY transaction. It takes no row locks, so appends
  and updates go on; for as long as it lasts, VACUUM keeps the row versions it may still
  read, and DDL (a migration) on the tables it has read waits for it to end. The level is
  set for this transaction alone (SET TRANSACTION), so a connection given back to the pool
  goes back as it came.
- SQLite: a deferred read transaction (BEGIN, not the IMMEDIATE every other transaction
  here begins with, which takes the write lock and would queue every writer behind the
  whole read). In WAL mode a reader does not block writers; the snapshot is taken at its
  first read, done at once so the moment is the start. For as long as it lasts, a
  checkpoint cannot move past it, so the WAL file grows until it ends.

Inside a transaction of the caller's (a test's, say) there is nothing to begin: the reads
are that transaction's, at its isolation level.

A snapshot read at the pace of someone else (a download, read as its client takes it) is
bounded with `read_snapshot_idle_limit`: a client that stops reading runs none of the
reader's code again until it reads on, so only the database can end the snapshot then.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction


class _ReadAtomic(transaction.Atomic):
    """`transaction.atomic` beginning SQLite's transaction DEFERRED whatever the
    connection's transaction_mode (qorven.runtime.environment sets IMMEDIATE)."""

    def __enter__(self) -> None:
        connection: Any = connections[self.using or DEFAULT_DB_ALIAS]
        if connection.vendor != "sqlite":
            return super().__enter__()
        connection.ensure_connection()  # a new connection reads its transaction_mode from the settings
        mode, connection.transaction_mode = connection.transaction_mode, "DEFERRED"
        try:
            return super().__enter__()
        finally:
            connection.transaction_mode = mode


@contextmanager
def read_snapshot(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """Run the block's reads on `using` as one consistent snapshot, taken on entry. Enter
    and leave it on the same thread (the connection is that thread's); nothing in it may
    write."""
    connection = connections[using]
    if connection.in_atomic_block:
        yield
        return
    with _ReadAtomic(using, savepoint=False, durable=False):
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                cursor.execute("SELECT 1")  # the snapshot is taken at the first query
            else:
                cursor.execute("SELECT 1 FROM sqlite_master LIMIT 1")  # the first read of the file takes it
        yield


def read_snapshot_idle_limit(seconds: float, using: str = DEFAULT_DB_ALIAS) -> None:
    """On PostgreSQL, the snapshot's session is ended by the server should it stay idle in
    its transaction `seconds` from now (idle_in_transaction_session_timeout, for this
    transaction alone), whether or not the reader comes back; the reader's next query then
    fails, and leaving read_snapshot drops the connection. Nothing on SQLite, whose reader
    holds up no writer (a checkpoint waits for it, the WAL file grows meanwhile)."""
    connection = connections[using]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, true)",
                           [str(max(1, int(seconds * 1000)))])
