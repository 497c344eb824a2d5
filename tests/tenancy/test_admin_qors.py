"""A Qor stays in its tenant: moved to another, it would take the tenant's conversations,
memories and bindings' senders along to be answered with the other tenant's prompt, project
context and MCP servers, while those rows still name the first tenant."""
from __future__ import annotations

import pytest
from django.urls import reverse

from ..admin_forms import served_form

pytestmark = pytest.mark.django_db


def test_a_qors_tenant_is_not_changed_in_the_admin(host, world):
    change = reverse("admin:qorven_qor_change", args=[world.qor_a.pk])
    page = host.get(change)
    data = {**served_form(page), "tenant": world.tenant_b.pk, "slug": "aria-moved", "is_default": ""}

    assert host.post(change, data).status_code == 302  # the rest of the page saved
    world.qor_a.refresh_from_db()
    assert (world.qor_a.tenant, world.qor_a.slug) == (world.tenant_a, "aria-moved")


def test_a_new_qor_is_made_in_the_tenant_chosen(host, world):
    add = reverse("admin:qorven_qor_add")
    response = host.post(add, {**served_form(host.get(add)), "tenant": world.tenant_b.pk, "name": "Sage",
                               "slug": "sage", "system_prompt": "Be brief.", "tool_allowlist": "[]",
                               "summarizer_mode": "auto", "compact_threshold": "0.9"})
    assert response.status_code == 302
    assert world.tenant_b.qors.filter(slug="sage").exists()
