"""The one access rule, as a table: the current role, capped by the surface and by the
account's own cap; nobody who is not (or no longer) an active member gets any trust."""
from __future__ import annotations

import pytest

from tenancy.access import surface_access
from tenancy.models import Membership
from tenancy.trust import Trust

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("role", "surface", "proven", "cap", "expected"), [
    ("owner", "web", None, Trust.OWNER, Trust.OWNER),
    ("owner", "tui", None, Trust.OWNER, Trust.OWNER),
    ("owner", "telegram", None, Trust.OWNER, Trust.OWNER),
    ("owner", "webchat", None, Trust.OWNER, Trust.TRUSTED),  # an embed on a page outside Qorven
    ("owner", "email", None, Trust.OWNER, Trust.PAIRED),  # a From header proves nothing
    ("owner", "email", False, Trust.OWNER, Trust.PAIRED),
    ("owner", "email", True, Trust.OWNER, Trust.TRUSTED),  # DKIM passed: trusted, never owner
    ("owner", "sms", True, Trust.OWNER, Trust.PAIRED),
    ("owner", "telegram", None, Trust.PAIRED, Trust.PAIRED),  # the owner lowered this account
    ("admin", "web", None, Trust.OWNER, Trust.TRUSTED),
    ("admin", "discord_dm", None, Trust.OWNER, Trust.TRUSTED),
    ("member", "web", None, Trust.OWNER, Trust.PAIRED),
    ("member", "slack_dm", None, Trust.PUBLIC, Trust.PUBLIC),
])
def test_the_role_is_capped_by_the_surface_and_the_account(world, role, surface, proven, cap, expected):
    Membership.objects.filter(tenant=world.tenant_a, user=world.bob).update(role=role)
    assert surface_access(tenant=world.tenant_a, user=world.bob, surface=surface, proven=proven, cap=cap) == expected


def test_no_trust_without_a_current_active_membership(world):
    assert surface_access(tenant=world.tenant_a, user=world.charlie, surface="web") is None  # another tenant's owner
    assert surface_access(tenant=world.tenant_a, user=None, surface="telegram") is None
    world.bob.is_active = False
    world.bob.save(update_fields=["is_active"])
    assert surface_access(tenant=world.tenant_a, user=world.bob, surface="web") is None
    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).delete()
    assert surface_access(tenant=world.tenant_a, user=world.alice, surface="web") is None


def test_a_role_change_is_read_at_once_in_both_directions(world):
    assert surface_access(tenant=world.tenant_a, user=world.bob, surface="web") == Trust.PAIRED
    Membership.objects.filter(tenant=world.tenant_a, user=world.bob).update(role="owner")
    assert surface_access(tenant=world.tenant_a, user=world.bob, surface="web") == Trust.OWNER
    Membership.objects.filter(tenant=world.tenant_a, user=world.bob).update(role="member")
    assert surface_access(tenant=world.tenant_a, user=world.bob, surface="web") == Trust.PAIRED


def test_the_workspace_read_with_a_role_gives_it_only_for_a_membership_that_lets_in_now(world):
    """tenancy.selectors.tenant_role_get, which the chat page and its socket open with: the
    role surface_access would decide from, read with the workspace."""
    from tenancy.selectors import tenant_role_get
    from tenancy.services import tenant_suspend

    assert tenant_role_get(slug="acme", user=world.alice) == (world.tenant_a, "owner")
    assert tenant_role_get(slug="acme", user=world.charlie) == (world.tenant_a, None)  # another tenant's owner
    assert tenant_role_get(slug="nope", user=world.alice) == (None, None)
    world.bob.is_active = False
    world.bob.save(update_fields=["is_active"])
    assert tenant_role_get(slug="acme", user=world.bob) == (world.tenant_a, None)
    tenant_suspend(tenant=world.tenant_a)
    assert tenant_role_get(slug="acme", user=world.alice) == (world.tenant_a, None)
    assert tenant_role_get(slug="globex", user=world.charlie) == (world.tenant_b, "owner")
