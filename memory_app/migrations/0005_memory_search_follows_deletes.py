"""SQLite: a memory's search entry goes with its row, however the row goes.

The FTS5 table holds its own copy of every memory's text. It was kept by the memory
services only, so a memory deleted by a cascade (a person, a workspace or a Qor deleted
in the admin) left its text in the index until `qorven clear-memory` pruned it. A trigger
on the memories table now deletes the entry (_trigger.py), and the entries such deletes
left behind are removed here; 'optimize' then rewrites the index without them, so their
words are not left in its blocks either. PostgreSQL: nothing to do, the search vector is
a column of the row and goes with it.
"""
from django.db import migrations

from ._trigger import DELETE_SQLITE, DELETE_TRIGGER, SEARCH_TABLE

SQLITE_FORWARD = [
    DELETE_SQLITE,
    f"DELETE FROM {SEARCH_TABLE} WHERE rowid NOT IN (SELECT id FROM memory_app_memory)",
    f"INSERT INTO {SEARCH_TABLE} ({SEARCH_TABLE}) VALUES ('optimize')",
]
SQLITE_BACKWARD = [f"DROP TRIGGER IF EXISTS {DELETE_TRIGGER}"]


def _run(statements: list[str]):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "sqlite":
            for sql in statements:
                schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):

    dependencies = [
        ('memory_app', '0004_skill_router'),
    ]

    operations = [
        migrations.RunPython(_run(SQLITE_FORWARD), _run(SQLITE_BACKWARD)),
    ]
