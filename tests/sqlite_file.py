"""The SQLite file's bytes, as a person who copied the file would read them."""
from __future__ import annotations

from django.db import connection


def sqlite_file_bytes() -> bytes:
    """The database file lower-cased, its write-ahead log folded in first. Needs committed
    data: `django_db(transaction=True)`."""
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(connection.settings_dict["NAME"], "rb") as f:
        return f.read().lower()
