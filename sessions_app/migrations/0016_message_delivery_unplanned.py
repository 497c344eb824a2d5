"""The mark of a reply for a platform whose delivery is not planned yet, and the partial
index the sweeper finds such replies by (channels_app.sweep).

The column is nullable with no default: SQLite adds it with ALTER TABLE (no rebuild, the
triggers stay) and PostgreSQL without rewriting the table; every message stored before
is NULL, so none of them is ever sent by the sweep. PostgreSQL builds the index
concurrently (messages keep being written meanwhile), which cannot run in a transaction.
"""
from django.db import migrations, models

from qorven.runtime.index_ops import AddIndexWithoutBlockingWrites


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('qorven', '0012_tenant_suspended_at'),
        ('sessions_app', '0015_message_search_normalised'),
    ]

    operations = [
        migrations.AddField(
            model_name='message',
            name='delivery_unplanned',
            field=models.BooleanField(blank=True, editable=False, null=True),
        ),
        AddIndexWithoutBlockingWrites(
            model_name='message',
            index=models.Index(condition=models.Q(('delivery_unplanned', True)), fields=['created_at'],
                               name='message_unplanned_idx'),
        ),
    ]
