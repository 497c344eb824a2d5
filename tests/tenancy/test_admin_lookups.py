"""A tenant admin filters a list by what the page offers (its filters, its date drill-down,
a related row's id), never by any field named in the URL: `?secret__startswith=…` would
answer yes or no about a value the page hides, a character at a time."""
from __future__ import annotations

import pytest
from django.urls import reverse

from channels_app.services import binding_create
from sessions_app.models import Message
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

pytestmark = pytest.mark.django_db

QORS = reverse("admin:qorven_qor_changelist")


def listed(client, url: str, **params: str) -> int | None:
    """How many rows the list shows with `params`; None when the admin refuses them."""
    response = client.get(url, params)
    if response.status_code == 400:
        return None
    assert response.status_code == 200
    return response.context["cl"].result_count


@pytest.mark.parametrize("lookup", ["main_api_key__startswith", "main_api_key__regex", "main_api_key"])
def test_a_tenant_admin_cannot_probe_the_hosts_model_key_with_a_list_filter(tenant_admin, world, lookup):
    world.qor_a.main_api_key = "sk-host-secret"
    world.qor_a.save(update_fields=["main_api_key"])
    assert "sk-host-secret" not in tenant_admin.get(reverse("admin:qorven_qor_change", args=[world.qor_a.pk])
                                                    ).content.decode()
    assert listed(tenant_admin, QORS, **{lookup: "sk-host-secret" if lookup == "main_api_key" else "^sk-host"
                                         if lookup.endswith("regex") else "sk-host"}) is None


def test_a_tenant_admin_cannot_probe_a_bindings_credentials_or_a_messages_error(tenant_admin, world):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": "tg-secret", "username": "aria_bot"})
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    row = message_append(session=session, role="user", content="hi", channel="web").message
    Message.objects.filter(pk=row.pk).update(answer_error="connect to 10.0.0.5 refused")
    bindings = reverse("admin:channels_app_channelbinding_changelist")
    messages = reverse("admin:sessions_app_message_changelist")
    assert listed(tenant_admin, bindings, credentials__token__startswith="111:") is None
    assert listed(tenant_admin, messages, answer_error__contains="10.0.0.5") is None


def test_a_tenant_admin_still_filters_by_what_the_page_offers(tenant_admin, world):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="user", content="hi", channel="web")
    messages = reverse("admin:sessions_app_message_changelist")
    assert listed(tenant_admin, messages, role__exact="user") == 1  # a list filter
    assert listed(tenant_admin, messages, role__exact="assistant") == 0
    assert listed(tenant_admin, messages, session__id__exact=str(session.pk)) == 1  # the session page's link
    assert listed(tenant_admin, QORS, tenant__id__exact=str(world.tenant_a.pk)) == 1
    memories = reverse("admin:memory_app_memory_changelist")
    assert listed(tenant_admin, memories, created_at__year="2026") == 0  # the date drill-down


def test_the_host_filters_as_django_allows(host, world):
    world.qor_a.main_api_key = "sk-host-secret"
    world.qor_a.save(update_fields=["main_api_key"])
    assert listed(host, QORS, main_api_key__startswith="sk-host") == 1


def test_a_tenant_admin_cannot_name_another_tenants_rows_by_id_in_a_raw_id_field(tenant_admin, world):
    """A field that takes a row's id names the row it holds beside it: only a row the field
    accepts, never another tenant's person or session by an id typed, posted or put in the URL."""
    theirs = session_resolve(tenant=world.tenant_b, qor=world.qor_b, channel="web", user=world.charlie)
    ours = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.bob)
    add = reverse("admin:memory_app_memory_add")

    page = tenant_admin.get(add, {"user": world.charlie.pk, "source_session": theirs.pk}).content.decode()
    assert "charlie" not in page and f"session {theirs.pk} " not in page
    refused = tenant_admin.post(add, {"tenant": world.tenant_a.pk, "qor": world.qor_a.pk, "type": "fact",
                                      "content": "x", "user": world.charlie.pk, "source_session": theirs.pk})
    assert refused.status_code == 200 and "charlie" not in refused.content.decode()
    identity = tenant_admin.get(reverse("admin:channels_app_identity_add"), {"user": world.charlie.pk})
    assert "charlie" not in identity.content.decode()

    own = tenant_admin.get(add, {"user": world.bob.pk, "source_session": ours.pk}).content.decode()
    # their own rows, named as before (a person chosen among the members: see below)
    assert f'<option value="{world.bob.pk}" selected>bob</option>' in own and f"session {ours.pk} " in own


def _lookups(html: str) -> list[str]:
    """The pages a form's lookup buttons (the magnifier beside a raw id field) open."""
    import re

    return [href.replace("&amp;", "&") for href in re.findall(r'href="([^"]+)"[^>]*class="related-lookup"', html)]


@pytest.mark.parametrize("page", ["admin:memory_app_memory_add", "admin:channels_app_identity_add"])
def test_a_tenant_admin_picks_a_person_from_the_members_not_from_a_list_they_are_refused(tenant_admin, world,
                                                                                           page):
    """The lookup beside a person's field opened the server's list of accounts, which a
    tenant admin is refused (403): they could only type a number they had no way to find."""
    response = tenant_admin.get(reverse(page))
    html = response.content.decode()
    for lookup in _lookups(html):
        assert tenant_admin.get(lookup).status_code == 200, lookup
    assert "/admin/auth/user/" not in html
    choices = response.context["adminform"].form.fields["user"].queryset
    assert sorted(u.username for u in choices) == ["alice", "bob"]  # acme's members, never charlie
    assert f'<option value="{world.bob.pk}">bob</option>' in html


def test_the_host_still_looks_a_person_up_in_the_accounts_list(host, world):
    html = host.get(reverse("admin:memory_app_memory_add")).content.decode()
    assert any(lookup.startswith("/admin/auth/user/") for lookup in _lookups(html))


def test_a_workspace_admin_is_not_offered_an_owner_to_link_a_sender_to(client, world):
    """Only an owner links a sender to an owner: a workspace admin (admin, not owner) who
    chose one was refused once they saved."""
    from tenancy.models import Membership
    from tests.factories.tenancy import UserFactory

    dana = UserFactory(username="dana", is_staff=True)
    Membership.objects.create(tenant=world.tenant_a, user=dana, role="admin")
    client.force_login(dana)
    choices = client.get(reverse("admin:channels_app_identity_add")).context["adminform"].form.fields["user"].queryset
    assert sorted(u.username for u in choices) == ["bob", "dana"]

    client.force_login(world.alice)  # the owner: everyone of acme
    world.alice.is_staff = True
    world.alice.save(update_fields=["is_staff"])
    choices = client.get(reverse("admin:channels_app_identity_add")).context["adminform"].form.fields["user"].queryset
    assert sorted(u.username for u in choices) == ["alice", "bob", "dana"]


@pytest.mark.parametrize("page", ["memory", "identity"])
def test_a_row_of_someone_who_left_keeps_its_person_when_a_tenant_admin_saves_it(tenant_admin, world, page):
    """The person's field offers the members; a row whose person has since left the
    workspace is still theirs: its page shows them chosen, and saving it (its text
    corrected, the sender denied) keeps them. A choice left out of the list had the browser
    post the first one, "---------": the memory became the Qor's own (read in its group
    chats), the sender no one's."""
    from channels_app.models import Identity
    from memory_app.models import Memory
    from memory_app.services import memory_add
    from tenancy.models import Membership
    from tests.factories.tenancy import UserFactory

    from ..admin_forms import served_form

    dave = UserFactory(username="dave")
    membership = Membership.objects.create(tenant=world.tenant_a, user=dave)
    if page == "memory":
        row, _ = memory_add(tenant=world.tenant_a, qor=world.qor_a, user=dave, type="fact", content="dave likes tea")
        changes = {"content": "dave likes green tea"}
    else:
        row = Identity.objects.create(tenant=world.tenant_a, channel="telegram", external_id="42", user=dave,
                                      approval=Identity.Approval.APPROVED)
        changes = {"approval": Identity.Approval.DENIED}
    membership.delete()
    url = reverse(f"admin:{row._meta.app_label}_{row._meta.model_name}_change", args=[row.pk])

    served = tenant_admin.get(url)
    assert f'<option value="{dave.pk}" selected>dave</option>' in served.content.decode()
    response = tenant_admin.post(url, {**served_form(served), **changes})
    assert response.status_code == 302, response.context["adminform"].form.errors
    row.refresh_from_db()
    assert row.user_id == dave.pk
    assert (row.content if isinstance(row, Memory) else row.approval) == next(iter(changes.values()))
