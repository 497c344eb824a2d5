"""Data migrations keep what people set: a paired account's level that was only its
member's role copied at approval stops being a cap; a level an owner lowered stays."""
from __future__ import annotations

import pytest
from django.db import connection

from channels_app.models import Identity

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("channels_app", "0005_pluginsetting_to_tenancy"), ("qorven", "0002_pluginsetting_from_channels_app")]


def test_copied_roles_stop_being_caps_and_lowered_levels_stay(schema):
    apps = schema.to(BEFORE).loader.project_state(BEFORE).apps
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

    schema.latest()

    levels = dict(Identity.objects.filter(pk__in=rows.values()).values_list("external_id", "trust_level"))
    assert levels == {"olga": "owner", "adam": "owner", "mia": "owner", "lowered": "paired"}
    assert Identity.objects.get(pk=stranger).trust_level == "paired"  # not linked: untouched


def test_the_admins_history_loses_the_senders_numbers_and_the_memories_text(schema):
    """Entries written before identities, pairing requests and memories were named by id
    (the rows may be long deleted) take the new names; other entries are untouched."""
    from django.contrib.admin.models import LogEntry
    from django.contrib.auth import get_user_model
    from django.contrib.contenttypes.models import ContentType

    before = [("channels_app", "0009_inbound_created_idx"), ("memory_app", "0004_skill_router")]
    schema.to(before)
    admin = get_user_model().objects.create(username="root")
    kinds = {m: ContentType.objects.get_or_create(app_label=app, model=m)[0]
             for app, m in [("channels_app", "identity"), ("channels_app", "pairingrequest"),
                            ("memory_app", "memory"), ("qorven", "qor")]}
    for model, object_id, name in [("identity", "7", "whatsapp:4915112345678"),
                                   ("pairingrequest", "3", "sms:+4915112345678 (approved)"),
                                   ("memory", "12", "fact: Admin's therapy notes: Tuesdays"),
                                   ("qor", "1", "acme/aria")]:
        LogEntry.objects.create(content_type=kinds[model], object_id=object_id, object_repr=name, action_flag=2,
                                user=admin)
    schema.latest()
    names = sorted(LogEntry.objects.values_list("object_repr", flat=True))
    assert names == ["acme/aria", "fact #12", "sms pairing #3 (approved)", "whatsapp identity #7"]


def test_the_sent_parts_index_is_built_without_holding_up_replies(schema):
    """PostgreSQL builds the sweeper's index of sent parts concurrently: a plain CREATE
    INDEX blocks every reply part written (and every delivery update) while it reads the
    whole table, which only grew before this release. SQLite builds it as before, and both
    can go back."""
    from io import StringIO

    from django.core.management import call_command

    sql = StringIO()
    call_command("sqlmigrate", "channels_app", "0012", stdout=sql)
    if connection.vendor == "postgresql":
        assert 'CREATE INDEX CONCURRENTLY "delivery_sent_idx"' in sql.getvalue()
        assert "BEGIN" not in sql.getvalue()
    else:
        assert 'CREATE INDEX "delivery_sent_idx"' in sql.getvalue()

    def indexes():
        with connection.cursor() as cursor:
            return connection.introspection.get_constraints(cursor, "channels_app_outbounddelivery")

    schema.to([("channels_app", "0011_long_reply_targets")])
    assert "delivery_sent_idx" not in indexes()
    schema.latest()
    assert indexes()["delivery_sent_idx"]["columns"] == ["sent_at"]


def _acme_aria_at(schema, before):
    """The schema migrated back to `before`, with acme and its Qor aria made in it: the
    historical ChannelBinding model, the tenant and the Qor."""
    apps = schema.to(before).loader.project_state(before).apps
    Tenant, Qor = apps.get_model("qorven", "Tenant"), apps.get_model("qorven", "Qor")
    tenant = Tenant.objects.create(name="Acme", slug="acme")
    qor = Qor.objects.create(tenant=tenant, name="Aria", slug="aria")
    return apps.get_model("channels_app", "ChannelBinding"), tenant, qor


def test_existing_bindings_answer_only_paired_people_in_groups(schema):
    """A binding made before the setting existed answered any stranger's mention in a group;
    once migrated it answers paired people there, as a new one does."""
    Binding, tenant, qor = _acme_aria_at(schema, [("channels_app", "0012_delivery_sent_idx")])
    pk = Binding.objects.create(tenant=tenant, qor=qor, kind="telegram", lookup_key="k", unpaired_response="ignore").pk

    schema.latest()

    from channels_app.models import ChannelBinding

    assert ChannelBinding.objects.filter(pk=pk).values_list("group_answers", "unpaired_response").get() == (
        "paired", "ignore")


def test_a_whatsapp_binding_made_before_the_verify_key_answers_metas_handshake(schema, client):
    Binding, tenant, qor = _acme_aria_at(schema, [("channels_app", "0013_binding_group_answers")])
    Binding.objects.create(tenant=tenant, qor=qor, kind="whatsapp", lookup_key="1055",
                           credentials={"phone_number_id": "1055", "token": "t", "app_secret": "s",
                                        "verify_token": "kept-verify"})
    Binding.objects.create(tenant=tenant, qor=qor, kind="telegram", lookup_key="k", credentials={"token": "x"})

    schema.latest()

    answer = client.get("/v1/webhooks/whatsapp", {"hub.mode": "subscribe", "hub.verify_token": "kept-verify",
                                                   "hub.challenge": "31"})
    assert (answer.status_code, answer.content) == (200, b"31")
    from channels_app.models import ChannelBinding

    assert ChannelBinding.objects.get(kind="telegram").verify_key == ""
