"""A tenant admin adds people to their workspace in the admin, as new accounts: the host's
other users are never offered, named or changed."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from tenancy.models import Membership

pytestmark = pytest.mark.django_db

ADD = reverse("admin:qorven_membership_add")


def test_a_tenant_admin_adds_a_member_as_a_new_account(tenant_admin, world):
    form = tenant_admin.get(ADD)
    assert form.status_code == 200
    page = form.content.decode()
    assert 'name="username"' in page and "charlie" not in page and "globex" not in page.lower()

    response = tenant_admin.post(ADD, {"tenant": world.tenant_a.pk, "username": "dora", "first_name": "Dora",
                                       "email": "", "password": "", "role": "member"})

    assert response.status_code == 302
    dora = get_user_model().objects.get(username="dora")
    assert Membership.objects.filter(tenant=world.tenant_a, user=dora, role="member").exists()
    assert not dora.has_usable_password()  # she writes from a platform and pairs there
    assert not dora.is_staff


def test_a_new_member_may_get_a_password_that_passes_the_validators(tenant_admin, world):
    weak = tenant_admin.post(ADD, {"tenant": world.tenant_a.pk, "username": "dora", "password": "123",
                                   "role": "member"})
    assert weak.status_code == 200 and not get_user_model().objects.filter(username="dora").exists()

    tenant_admin.post(ADD, {"tenant": world.tenant_a.pk, "username": "dora", "password": "violet-orchard-93",
                            "role": "member"})
    assert get_user_model().objects.get(username="dora").check_password("violet-orchard-93")


def test_a_tenant_admin_cannot_take_over_an_existing_account_or_add_to_another_workspace(tenant_admin, world):
    taken = tenant_admin.post(ADD, {"tenant": world.tenant_a.pk, "username": "Charlie", "role": "member"})
    assert taken.status_code == 200 and "That name is taken" in taken.content.decode()
    assert not Membership.objects.filter(tenant=world.tenant_a, user=world.charlie).exists()

    foreign = tenant_admin.post(ADD, {"tenant": world.tenant_b.pk, "username": "eve", "role": "member"})
    assert foreign.status_code == 200  # not a choice this admin has
    assert not get_user_model().objects.filter(username="eve").exists()


def test_the_host_still_adds_an_existing_account(host, world):
    response = host.post(ADD, {"tenant": world.tenant_b.pk, "user": world.bob.pk, "role": "member"})
    assert response.status_code == 302
    assert Membership.objects.filter(tenant=world.tenant_b, user=world.bob).exists()
