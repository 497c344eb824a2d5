"""A workspace admin (role admin, not owner) manages members and their senders, but never
acts as an owner or for one: a token moved onto the owner, a sender linked to the owner or
an owner's sender linked elsewhere would each let the admin write, or read, as the owner."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from channels_app.models import Identity
from channels_app.pairing import identity_get_or_create, pairing_request_for
from tenancy.models import ApiToken, Membership
from tenancy.selectors import api_token_authenticate
from tenancy.services import api_token_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def workspace_admin(client, world):
    """The admin as bob, made an admin (not an owner) of acme, and staff."""
    Membership.objects.filter(tenant=world.tenant_a, user=world.bob).update(role=Membership.Role.ADMIN)
    world.bob.is_staff = True
    world.bob.save(update_fields=["is_staff"])
    client.force_login(world.bob)
    return client


def token_form(token: ApiToken, **changes) -> dict:
    return {"tenant": token.tenant_id, "user": token.user_id, "name": token.name, "expires_at_0": "",
            "expires_at_1": "", "revoked_at_0": "", "revoked_at_1": "", **changes}


def test_a_workspace_admin_cannot_move_a_token_onto_the_owner_or_revive_a_revoked_one(workspace_admin, world):
    token, _ = api_token_create(tenant=world.tenant_a, user=world.bob, name="bob's")
    change = reverse("admin:qorven_apitoken_change", args=[token.pk])
    workspace_admin.post(change, token_form(token, user=world.alice.pk, name="renamed"))
    token.refresh_from_db()
    assert (token.user, token.name) == (world.bob, "renamed")  # what may change, changed; the owner, not

    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    workspace_admin.post(change, token_form(token))  # the revoked-at field sent empty
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_an_expired_token_is_not_revived_in_the_admin(tenant_admin, world):
    """An expired token is as dead as a revoked one: the admin does not set it going again
    (a leaked token that had run out would work for whoever holds it)."""
    token, raw = api_token_create(tenant=world.tenant_a, user=world.bob, name="bob's",
                                  expires_at=timezone.now() - timedelta(days=1))
    change = reverse("admin:qorven_apitoken_change", args=[token.pk])
    tenant_admin.post(change, token_form(token, name="renamed"))  # the expiry sent empty: never
    token.refresh_from_db()
    assert token.name == "renamed" and token.expires_at is not None and token.expires_at < timezone.now()
    assert api_token_authenticate(raw=raw) is None

    live, _ = api_token_create(tenant=world.tenant_a, user=world.bob, expires_at=timezone.now() + timedelta(days=1))
    tenant_admin.post(reverse("admin:qorven_apitoken_change", args=[live.pk]), token_form(live))
    live.refresh_from_db()
    assert live.expires_at is None  # a live token's end is still the admin's to move


def sender_of(world, user, external_id: str) -> Identity:
    return Identity.objects.create(tenant=world.tenant_a, channel="telegram", external_id=external_id, user=user,
                                   approval="approved", trust_level="owner", display_name=user.first_name)


def relinked(client, world, sender: Identity, user) -> int:
    """The status of the admin's change of `sender`, linking it to `user`."""
    change = reverse("admin:channels_app_identity_change", args=[sender.pk])
    return client.post(change, {"tenant": world.tenant_a.pk, "channel": "telegram", "external_id": sender.external_id,
                                "user": user.pk, "display_name": sender.display_name, "trust_level": "owner",
                                "approval": "approved", "reply_target": ""}).status_code


def test_a_workspace_admin_cannot_link_a_sender_to_the_owner(workspace_admin, world):
    sender = sender_of(world, world.bob, "55")
    assert relinked(workspace_admin, world, sender, world.alice) == 200  # not among the choices: the form refuses it
    assert Identity.objects.get(pk=sender.pk).user == world.bob


def test_a_workspace_admin_cannot_change_or_take_over_the_owners_sender(workspace_admin, world):
    owners = sender_of(world, world.alice, "42")
    assert relinked(workspace_admin, world, owners, world.bob) == 403
    assert Identity.objects.get(pk=owners.pk).user == world.alice


def test_a_workspace_admin_cannot_approve_a_sender_as_the_owner(workspace_admin, world):
    identity = identity_get_or_create(tenant=world.tenant_a, channel="telegram", external_id="4242",
                                      display_name="Ravi")
    request = pairing_request_for(identity=identity, text="hi").request
    changelist = reverse("admin:channels_app_pairingrequest_changelist")
    ask = workspace_admin.post(changelist, {"action": "approve_linking", "_selected_action": [request.pk]})
    assert "alice" not in ask.content.decode()  # the owner is not offered
    refused = workspace_admin.post(changelist, {"action": "approve_linking", "_selected_action": [request.pk],
                                                "member": world.alice.pk}, follow=True)
    assert "Choose a member of the workspace." in [str(m) for m in refused.context["messages"]]
    assert Identity.objects.get(pk=identity.pk).user is None


def test_the_owner_links_a_sender_to_herself(tenant_admin, world):
    sender = sender_of(world, world.bob, "55")
    assert relinked(tenant_admin, world, sender, world.alice) == 302
    assert Identity.objects.get(pk=sender.pk).user == world.alice


def test_a_workspace_admin_sees_the_owners_tokens_but_cannot_revoke_delete_or_unend_them(workspace_admin, world):
    """The owner's token is the owner's (and the host's) to revoke or re-date: a workspace
    admin who revoked it would shut the owner's scripts out, and one who cleared its end
    would keep a token the owner meant to run out working for good. The list still shows
    it, as it shows the owner's membership: which tokens the workspace has out is theirs
    to know, and to ask the owner about."""
    ends = timezone.now() + timedelta(days=1)
    owners, _ = api_token_create(tenant=world.tenant_a, user=world.alice, name="alice's", expires_at=ends)
    bobs, _ = api_token_create(tenant=world.tenant_a, user=world.bob, name="bob's")
    changelist = reverse("admin:qorven_apitoken_changelist")
    assert owners.prefix in workspace_admin.get(changelist).content.decode()

    change = reverse("admin:qorven_apitoken_change", args=[owners.pk])
    assert workspace_admin.post(change, token_form(owners)).status_code == 403  # its end sent empty
    workspace_admin.post(changelist, {"action": "revoke", "_selected_action": [owners.pk, bobs.pk]})
    workspace_admin.post(changelist, {"action": "delete_selected", "_selected_action": [owners.pk], "post": "yes"})
    assert workspace_admin.post(reverse("admin:qorven_apitoken_delete", args=[owners.pk]),
                                {"post": "yes"}).status_code == 403
    owners.refresh_from_db()
    assert (owners.revoked_at, owners.expires_at) == (None, ends)
    bobs.refresh_from_db()
    assert bobs.revoked_at is None  # one refused, none revoked: the admin is told to choose again

    workspace_admin.post(changelist, {"action": "revoke", "_selected_action": [bobs.pk]})
    bobs.refresh_from_db()
    assert bobs.revoked_at is not None  # a member's, and an admin's, are theirs to revoke


def test_the_owner_revokes_her_own_token_in_the_admin(tenant_admin, world):
    owners, _ = api_token_create(tenant=world.tenant_a, user=world.alice, name="alice's")
    tenant_admin.post(reverse("admin:qorven_apitoken_changelist"), {"action": "revoke",
                                                                    "_selected_action": [owners.pk]})
    owners.refresh_from_db()
    assert owners.revoked_at is not None


def offered_people(response) -> list[str]:
    return sorted(u.username for u in response.context["adminform"].form.fields["user"].queryset)


def test_a_senders_people_are_those_its_own_workspace_lets_the_admin_link_it_to(workspace_admin, world):
    """Bob is an admin, not an owner, of acme, and owns globex, where alice (acme's owner)
    is a member: a globex sender is his to link to her. The choices were cut by every
    workspace he administers, so acme's owner was not offered on globex's pages either."""
    from tests.factories.tenancy import UserFactory

    Membership.objects.create(tenant=world.tenant_b, user=world.bob, role=Membership.Role.OWNER)
    Membership.objects.create(tenant=world.tenant_b, user=world.alice, role=Membership.Role.MEMBER)
    Membership.objects.create(tenant=world.tenant_a, user=UserFactory(username="erin"))  # acme's alone
    globex_sender = Identity.objects.create(tenant=world.tenant_b, channel="telegram", external_id="77",
                                            user=world.charlie, approval="approved", trust_level="paired")
    change = reverse("admin:channels_app_identity_change", args=[globex_sender.pk])
    assert offered_people(workspace_admin.get(change)) == ["alice", "bob", "charlie"]
    acme_sender = sender_of(world, world.bob, "55")
    acme_change = reverse("admin:channels_app_identity_change", args=[acme_sender.pk])
    assert offered_people(workspace_admin.get(acme_change)) == ["bob", "erin"]  # acme's owner: not his to link

    linked = workspace_admin.post(change, {"tenant": world.tenant_b.pk, "channel": "telegram", "external_id": "77",
                                           "user": world.alice.pk, "display_name": "", "trust_level": "paired",
                                           "approval": "approved", "reply_target": ""})
    assert linked.status_code == 302
    assert Identity.objects.get(pk=globex_sender.pk).user == world.alice

    add = reverse("admin:channels_app_identity_add")
    new = {"channel": "telegram", "display_name": "", "trust_level": "paired", "approval": "approved",
           "reply_target": "", "user": world.alice.pk}
    assert offered_people(workspace_admin.get(add, {"tenant": world.tenant_b.pk})) == ["alice", "bob", "charlie"]
    assert offered_people(workspace_admin.get(add, {"tenant": world.tenant_a.pk})) == ["bob", "erin"]
    refused = workspace_admin.post(add, {**new, "tenant": world.tenant_a.pk, "external_id": "88"})
    assert refused.status_code == 200 and "user" in refused.context["adminform"].form.errors
    assert workspace_admin.post(add, {**new, "tenant": world.tenant_b.pk, "external_id": "99"}).status_code == 302
    assert not Identity.objects.filter(external_id="88").exists()
    assert Identity.objects.get(external_id="99").user == world.alice
