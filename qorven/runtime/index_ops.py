"""An index added to a table the running install writes to all the time.

PostgreSQL builds it CONCURRENTLY: a plain CREATE INDEX holds a lock that blocks every
insert and update of the table until the whole table is read. The migration using it
sets `atomic = False` (CONCURRENTLY cannot run in a transaction). SQLite, which has no
such build, adds the index as AddIndex does. Used by the migrations of every app.
"""
from __future__ import annotations

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations


class AddIndexWithoutBlockingWrites(AddIndexConcurrently):
    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)
