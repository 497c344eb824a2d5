"""The admin's history (django_admin_log) named identities and pairing requests as
`<channel>:<external id>`, a phone number or an email address on some channels, and kept
that name after the row was deleted. Existing entries take the name the rows now have
(`whatsapp identity #7`, `whatsapp pairing #3 (approved)`)."""
import re

from django.db import migrations

PAIRING = re.compile(r"^(?P<channel>[\w-]+):.*\((?P<state>\w+)\)$", re.DOTALL)


def names_without_external_ids(apps, schema_editor) -> None:
    LogEntry = apps.get_model("admin", "LogEntry")
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in ("identity", "pairingrequest"):
        kind = ContentType.objects.filter(app_label="channels_app", model=model).first()
        if kind is None:
            continue
        changed = []
        for entry in LogEntry.objects.filter(content_type=kind, object_repr__contains=":").only(
                "pk", "object_id", "object_repr").iterator():
            channel = entry.object_repr.partition(":")[0]
            if model == "identity":
                entry.object_repr = f"{channel} identity #{entry.object_id}"
            else:
                match = PAIRING.match(entry.object_repr)
                state = f" ({match['state']})" if match else ""
                entry.object_repr = f"{channel} pairing #{entry.object_id}{state}"
            changed.append(entry)
        LogEntry.objects.bulk_update(changed, ["object_repr"], batch_size=500)


class Migration(migrations.Migration):
    dependencies = [
        ("channels_app", "0009_inbound_created_idx"),
        ("admin", "0003_logentry_add_action_flag_choices"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.RunPython(names_without_external_ids, migrations.RunPython.noop),
    ]
