"""Message.revision, moved on by a trigger on every UPDATE of a message (both databases).

The column is nullable, so adding it never rewrites a long messages table (SQLite and
PostgreSQL add it in place); a row never updated keeps NULL. On SQLite the table's other
triggers are made again too, as after any change to the table (see _trigger).
"""
from django.db import migrations, models

from . import _trigger


def create(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        _trigger.create_all_on_sqlite(apps, schema_editor)
    elif vendor == "postgresql":
        schema_editor.execute(_trigger.REVISION_POSTGRESQL)


def drop(apps, schema_editor) -> None:
    name = _trigger.REVISION_TRIGGER
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")
    elif vendor == "postgresql":
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {name} ON sessions_app_message")
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {name}()")


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0007_image_name"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="revision",
            field=models.PositiveIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(create, drop),
    ]
