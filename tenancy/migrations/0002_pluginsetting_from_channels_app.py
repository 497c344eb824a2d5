"""PluginSetting joins tenancy on the table it already has (`channels_app_pluginsetting`):
only Django's model state and the content type move, no row is copied and no table is
rebuilt, so admin permissions and log entries keep pointing at the same switches."""
import django.db.models.deletion
from django.db import migrations, models


def content_type_move(apps, schema_editor, *, source: str, target: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    if not ContentType.objects.filter(app_label=target, model="pluginsetting").exists():
        ContentType.objects.filter(app_label=source, model="pluginsetting").update(app_label=target)


def forwards(apps, schema_editor) -> None:
    content_type_move(apps, schema_editor, source="channels_app", target="qorven")


def backwards(apps, schema_editor) -> None:
    content_type_move(apps, schema_editor, source="qorven", target="channels_app")


class Migration(migrations.Migration):
    dependencies = [
        ("qorven", "0001_initial"),
        ("channels_app", "0005_pluginsetting_to_tenancy"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="PluginSetting",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                                   verbose_name="ID")),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        ("kind", models.CharField(choices=[("tool", "Tool"), ("channel", "Channel")], max_length=8)),
                        ("name", models.CharField(max_length=64)),
                        ("enabled", models.BooleanField(default=True)),
                        ("tenant", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                                     related_name="plugin_settings", to="qorven.tenant")),
                    ],
                    options={
                        "db_table": "channels_app_pluginsetting",
                        "ordering": ["tenant", "kind", "name"],
                        "constraints": [models.UniqueConstraint(fields=("tenant", "kind", "name"),
                                                                name="plugin_unique_name")],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
