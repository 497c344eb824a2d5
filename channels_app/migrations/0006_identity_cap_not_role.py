"""A paired account no longer keeps a copy of its member's role: its `trust_level` is only
a cap the owner may set, and the member's current role decides below it. Accounts whose
level is just the role copied at approval get no cap (owner), so a later promotion
applies to them too; a level lower than the current role (set by an owner, or left from
before a promotion) stays as a cap."""
from django.db import migrations

ROLE_TRUST = {"owner": "owner", "admin": "trusted", "member": "paired"}


def caps_from_copied_roles(apps, schema_editor) -> None:
    Identity = apps.get_model("channels_app", "Identity")
    Membership = apps.get_model("qorven", "Membership")
    roles = {(m.tenant_id, m.user_id): m.role for m in Membership.objects.all().only("tenant_id", "user_id", "role")}
    linked = Identity.objects.filter(approval="approved", user__isnull=False).exclude(trust_level="owner")
    for identity in linked.only("pk", "tenant_id", "user_id", "trust_level").iterator():
        role = roles.get((identity.tenant_id, identity.user_id))
        if role is not None and identity.trust_level == ROLE_TRUST.get(role, "paired"):
            Identity.objects.filter(pk=identity.pk).update(trust_level="owner")


class Migration(migrations.Migration):
    dependencies = [
        ("channels_app", "0005_pluginsetting_to_tenancy"),
        ("qorven", "0002_pluginsetting_from_channels_app"),
    ]

    operations = [
        migrations.RunPython(caps_from_copied_roles, migrations.RunPython.noop),
    ]
