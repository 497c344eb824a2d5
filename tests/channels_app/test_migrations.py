"""Data migrations keep what people set: a paired account's level that was only its
member's role copied at approval stops being a cap; a level an owner lowered stays."""
from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from channels_app.models import Identity

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("channels_app", "0005_pluginsetting_to_tenancy"), ("qorven", "0002_pluginsetting_from_channels_app")]


def migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor


def test_copied_roles_stop_being_caps_and_lowered_levels_stay():
    apps = migrate(BEFORE).loader.project_state(BEFORE).apps
    Tenant, Membership = apps.get_model("qorven", "Tenant"), apps.get_model("qorven", "Membership")
    User, Identity_ = apps.get_model("auth", "User"), apps.get_model("channels_app", "Identity")
    tenant = Tenant.objects.create(name="Acme", slug="acme")
    rows = {}
    for name, role, level in [("olga", "owner", "owner"), ("adam", "admin", "trusted"), ("mia", "member", "paired"),
                              ("lowered", "owner", "paired")]:
        user = User.objects.create(username=name)
        Membership.objects.create(tenant=tenant, user=user, role=role)
        rows[name] = Identity_.objects.create(tenant=tenant, channel="telegram", external_id=name, user=user,
                                              approval="approved", trust_level=level).pk
    stranger = Identity_.objects.create(tenant=tenant, channel="telegram", external_id="x", approval="pending").pk

    executor = MigrationExecutor(connection)
    migrate(executor.loader.graph.leaf_nodes())

    levels = dict(Identity.objects.filter(pk__in=rows.values()).values_list("external_id", "trust_level"))
    assert levels == {"olga": "owner", "adam": "owner", "mia": "owner", "lowered": "paired"}
    assert Identity.objects.get(pk=stranger).trust_level == "paired"  # not linked: untouched
