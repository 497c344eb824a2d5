"""Someone removed from a workspace leaves their API tokens for it behind, revoked: let
back in later, they need a new one, and a token they (or whoever copied it) kept stays dead."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tenancy.models import ApiToken, Membership
from tenancy.selectors import api_token_authenticate
from tenancy.services import api_token_create

from .test_admin_members import members_posted

pytestmark = pytest.mark.django_db


def _removed_on_its_page(client, membership: Membership) -> None:
    response = client.post(reverse("admin:qorven_membership_delete", args=[membership.pk]), {"post": "yes"})
    assert response.status_code == 302


def _removed_from_the_list(client, membership: Membership) -> None:
    response = client.post(reverse("admin:qorven_membership_changelist"),
                           {"action": "delete_selected", "_selected_action": [membership.pk], "post": "yes"})
    assert response.status_code == 302


def _removed_on_the_workspaces_page(client, membership: Membership) -> None:
    assert members_posted(client, membership.tenant, **{membership.user.username: None}) == 302


@pytest.mark.parametrize("remove", [_removed_on_its_page, _removed_from_the_list, _removed_on_the_workspaces_page])
def test_a_member_removed_in_the_admin_and_let_back_in_needs_a_new_token(tenant_admin, world, remove):
    _, raw = api_token_create(tenant=world.tenant_a, user=world.bob, name="laptop")
    _, elsewhere = api_token_create(tenant=world.tenant_a, user=world.alice)  # another member's: untouched
    Membership.objects.create(tenant=world.tenant_b, user=world.bob)
    _, other_workspace = api_token_create(tenant=world.tenant_b, user=world.bob)  # bob stays in globex
    assert api_token_authenticate(raw=raw) is not None

    remove(tenant_admin, Membership.objects.get(tenant=world.tenant_a, user=world.bob))
    assert not Membership.objects.filter(tenant=world.tenant_a, user=world.bob).exists()
    assert ApiToken.objects.get(tenant=world.tenant_a, user=world.bob).revoked_at is not None

    Membership.objects.create(tenant=world.tenant_a, user=world.bob)  # let back in
    assert api_token_authenticate(raw=raw) is None
    assert api_token_authenticate(raw=elsewhere) is not None
    assert api_token_authenticate(raw=other_workspace) is not None


def test_a_workspace_admin_removes_members_but_not_an_owner_nor_the_owners_tokens(client, world):
    from tests.factories.tenancy import UserFactory

    dana = UserFactory(username="dana", is_staff=True)
    Membership.objects.create(tenant=world.tenant_a, user=dana, role="admin")
    client.force_login(dana)
    _, owners = api_token_create(tenant=world.tenant_a, user=world.alice)
    _, bobs = api_token_create(tenant=world.tenant_a, user=world.bob)
    alice = Membership.objects.get(tenant=world.tenant_a, user=world.alice)
    bob = Membership.objects.get(tenant=world.tenant_a, user=world.bob)

    refused = client.post(reverse("admin:qorven_membership_changelist"),
                          {"action": "delete_selected", "_selected_action": [alice.pk, bob.pk], "post": "yes"})
    assert refused.status_code == 403
    assert Membership.objects.filter(pk__in=[alice.pk, bob.pk]).count() == 2
    assert api_token_authenticate(raw=owners) is not None and api_token_authenticate(raw=bobs) is not None

    _removed_from_the_list(client, bob)
    assert api_token_authenticate(raw=bobs) is None
    assert api_token_authenticate(raw=owners) is not None
