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


@pytest.fixture
def workspace_admin(client, world):
    """Dana: staff, an admin (not an owner) of acme."""
    from tests.factories.tenancy import UserFactory

    dana = UserFactory(username="dana", is_staff=True)
    Membership.objects.create(tenant=world.tenant_a, user=dana, role="admin")
    client.force_login(dana)
    return client


def test_a_workspace_admin_cannot_make_or_unmake_an_owner(workspace_admin, world):
    made = workspace_admin.post(ADD, {"tenant": world.tenant_a.pk, "username": "eve", "role": "owner"})
    assert made.status_code == 403 and not get_user_model().objects.filter(username="eve").exists()

    bob = Membership.objects.get(tenant=world.tenant_a, user=world.bob)
    change = reverse("admin:qorven_membership_change", args=[bob.pk])
    promoted = workspace_admin.post(change, {"tenant": world.tenant_a.pk, "user": world.bob.pk, "role": "owner"})
    assert promoted.status_code == 403
    bob.refresh_from_db()
    assert bob.role == "member"

    alice = Membership.objects.get(tenant=world.tenant_a, user=world.alice)
    demoted = workspace_admin.post(reverse("admin:qorven_membership_change", args=[alice.pk]),
                                   {"tenant": world.tenant_a.pk, "user": world.alice.pk, "role": "member"})
    assert demoted.status_code == 403
    removed = workspace_admin.post(reverse("admin:qorven_membership_delete", args=[alice.pk]), {"post": "yes"})
    assert removed.status_code == 403
    assert Membership.objects.get(pk=alice.pk).role == "owner"

    added = workspace_admin.post(ADD, {"tenant": world.tenant_a.pk, "username": "eve", "role": "member"})
    assert added.status_code == 302  # members (and admins) are theirs to add


def members_posted(client, tenant, **roles) -> int:
    """Post the workspace's own admin page back with the members' roles changed (a role of
    None deletes that member's row); the status of the answer (200: the page again, with
    the refusal)."""
    from ..admin_forms import served_form

    change = reverse("admin:qorven_tenant_change", args=[tenant.pk])
    data = served_form(client.get(change))
    usernames = dict(Membership.objects.filter(tenant=tenant).values_list("pk", "user__username"))
    for key, value in list(data.items()):
        if key.startswith("memberships-") and key.endswith("-id") and usernames.get(value) in roles:
            row = key[: -len("-id")]
            role = roles[usernames[value]]
            data[f"{row}-role" if role else f"{row}-DELETE"] = role or "on"
    response = client.post(change, data)
    if response.status_code == 200:
        assert "Only an owner of the workspace makes, changes or removes an owner." in response.content.decode()
    return response.status_code


def test_a_workspace_admin_cannot_make_or_unmake_an_owner_on_the_workspaces_page(workspace_admin, world):
    def roles() -> dict[str, str]:
        return dict(Membership.objects.filter(tenant=world.tenant_a).values_list("user__username", "role"))

    before = roles()
    assert members_posted(workspace_admin, world.tenant_a, dana="owner") == 200
    assert members_posted(workspace_admin, world.tenant_a, alice="member") == 200
    assert members_posted(workspace_admin, world.tenant_a, alice=None) == 200
    assert roles() == before

    assert members_posted(workspace_admin, world.tenant_a, bob="admin") == 302  # members are theirs to manage
    assert roles()["bob"] == "admin"


def test_an_owner_makes_another_owner_on_the_workspaces_page(tenant_admin, world):
    assert members_posted(tenant_admin, world.tenant_a, bob="owner") == 302
    assert Membership.objects.get(tenant=world.tenant_a, user=world.bob).role == "owner"
