"""PluginSetting (the per-tenant on/off switches) belongs to tenancy now. Only Django's
model state moves: the table `channels_app_pluginsetting` and its rows stay as they are."""
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("channels_app", "0004_delivery_not_before"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="PluginSetting")],
            database_operations=[],
        ),
    ]
