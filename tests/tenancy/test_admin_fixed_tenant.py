"""A row stays in the tenant it was made in, and a membership with its person: someone
who administers two tenants moved a member, a channel account, a sender or a memory from
one to the other on its change page, taking what it carries (a person's tokens, a bot's
senders and their chats) along while the rows around it still named the first tenant."""
from __future__ import annotations

import pytest
from django.urls import reverse

from channels_app.models import ChannelBinding, Identity
from channels_app.services import binding_create
from memory_app.models import LearnedSkill, Memory
from tenancy.models import Membership

from ..admin_forms import served_form
from .test_admin_members import members_posted

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_tenants_owner(tenant_admin, world):
    """alice, acme's owner, owns globex too."""
    Membership.objects.create(tenant=world.tenant_b, user=world.alice, role="owner")
    return tenant_admin


@pytest.fixture(params=["two_tenants_owner", "host"])
def editor(request):
    return request.getfixturevalue(request.param)


def _posted(client, url: str, **changes) -> int:
    page = client.get(url)
    assert page.status_code == 200
    return client.post(url, {**served_form(page), **changes}).status_code


def test_a_memberships_tenant_and_person_are_not_changed(editor, world):
    bob = Membership.objects.get(tenant=world.tenant_a, user=world.bob)
    url = reverse("admin:qorven_membership_change", args=[bob.pk])
    assert _posted(editor, url, tenant=world.tenant_b.pk, role="admin") == 302
    assert _posted(editor, url, user=world.charlie.pk) == 302  # globex's owner, in acme too
    bob.refresh_from_db()
    assert (bob.tenant, bob.user, bob.role) == (world.tenant_a, world.bob, "admin")
    assert not Membership.objects.filter(tenant=world.tenant_a, user=world.charlie).exists()


def test_a_member_row_on_the_tenants_page_keeps_its_person(editor, world):
    change = reverse("admin:qorven_tenant_change", args=[world.tenant_a.pk])
    data = served_form(editor.get(change))
    bob = Membership.objects.get(tenant=world.tenant_a, user=world.bob)
    row = next(k[: -len("-id")] for k, v in data.items() if k.startswith("memberships-") and k.endswith("-id")
               and str(v) == str(bob.pk))
    data[f"{row}-user"] = world.charlie.pk  # globex's owner: the row would be his, and bob gone from acme
    editor.post(change, data)
    bob.refresh_from_db()
    assert bob.user == world.bob
    assert not Membership.objects.filter(tenant=world.tenant_a, user=world.charlie).exists()
    assert members_posted(editor, world.tenant_a, bob="admin") == 302  # its role is still theirs to change


def test_a_bindings_tenant_is_not_changed(editor, world):
    binding = binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                             credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    url = reverse("admin:channels_app_channelbinding_change", args=[binding.pk])
    _posted(url=url, client=editor, tenant=world.tenant_b.pk, qor=world.qor_b.pk, name="moved")
    binding.refresh_from_db()
    assert (binding.tenant, binding.qor) == (world.tenant_a, world.qor_a)
    # Its Qor is still checked against the tenant it stays in.
    assert ChannelBinding.objects.get(pk=binding.pk).name != "moved"


def test_a_senders_tenant_is_not_changed(editor, world):
    identity = Identity.objects.create(tenant=world.tenant_a, channel="telegram", external_id="42")  # unpaired
    url = reverse("admin:channels_app_identity_change", args=[identity.pk])
    assert _posted(editor, url, tenant=world.tenant_b.pk, display_name="Bob") == 302
    identity.refresh_from_db()
    assert (identity.tenant, identity.display_name) == (world.tenant_a, "Bob")
    # Linked to a person, it is to one of the tenant it stays in.
    assert _posted(editor, url, user=world.charlie.pk) == 200
    assert Identity.objects.get(pk=identity.pk).user is None


def test_a_memorys_tenant_is_not_changed(editor, world):
    Membership.objects.create(tenant=world.tenant_b, user=world.bob)  # a member of both
    memory = Memory.objects.create(tenant=world.tenant_a, qor=world.qor_a, user=world.bob, type="fact",
                                   content="likes tea")
    url = reverse("admin:memory_app_memory_change", args=[memory.pk])
    _posted(editor, url, tenant=world.tenant_b.pk, qor=world.qor_b.pk, content="likes coffee")
    memory.refresh_from_db()
    assert (memory.tenant, memory.qor) == (world.tenant_a, world.qor_a)
    assert memory.content == "likes tea"  # a Qor of another tenant is refused, as on an add page


def _admin_skill(tenant) -> LearnedSkill:
    return LearnedSkill.objects.create(tenant=tenant, name="triage", description="Sorts the inbox", body="b",
                                       source="admin")


def test_a_skills_tenant_is_not_changed(editor, world):
    skill = _admin_skill(world.tenant_a)
    url = reverse("admin:memory_app_learnedskill_change", args=[skill.pk])
    assert _posted(editor, url, tenant=world.tenant_b.pk, description="Sorts the mail") == 302
    skill.refresh_from_db()
    assert (skill.tenant, skill.description) == (world.tenant_a, "Sorts the mail")


def test_a_shared_skill_is_not_given_a_tenant(host, world):
    skill = _admin_skill(None)
    url = reverse("admin:memory_app_learnedskill_change", args=[skill.pk])
    assert _posted(host, url, tenant=world.tenant_a.pk, description="Sorts the mail") == 302
    skill.refresh_from_db()
    assert (skill.tenant, skill.description) == (None, "Sorts the mail")
