"""Memories and learned skills in the admin."""
from __future__ import annotations

import pytest

from memory_app.models import CompactRequest, LearnedSkill, Memory
from memory_app.selectors import memory_search
from tenancy.models import Membership

from ..factories.memory_app import remember
from ..factories.tenancy import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def host(client):
    user = UserFactory(username="host", is_staff=True, is_superuser=True)
    client.force_login(user)
    return client


@pytest.fixture
def tenant_admin(client, world):
    user = UserFactory(username="acme-admin", is_staff=True)
    Membership.objects.create(tenant=world.tenant_a, user=user, role=Membership.Role.ADMIN)
    client.force_login(user)
    return client


def add_form(world, content, **extra):
    return {"tenant": world.tenant_a.pk, "qor": world.qor_a.pk, "user": world.alice.pk, "type": "fact",
            "content": content, "channels": "[]", "period_start_0": "", "period_start_1": "",
            "period_end_0": "", "period_end_1": "", "source_session": "", **extra}


def test_a_memory_added_in_the_admin_is_searchable_and_not_stored_twice(host, world):
    response = host.post("/admin/memory_app/memory/add/", add_form(world, "Alice's bike is a Brompton"))
    assert response.status_code == 302, response.content.decode()[:2000]
    memory = Memory.objects.get()
    assert memory.content_hash and memory.tenant == world.tenant_a
    assert memory_search(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="bike") == [memory]

    again = host.post("/admin/memory_app/memory/add/", add_form(world, "  alice's BIKE is a brompton "))
    assert again.status_code == 200 and "already has the same memory" in again.content.decode()
    assert Memory.objects.count() == 1

    wrong = host.post("/admin/memory_app/memory/add/", add_form(world, "x", user=world.charlie.pk))
    assert "not a member of the tenant" in wrong.content.decode()


def test_edits_and_deletes_in_the_admin_keep_search_in_step(host, world):
    memory = remember(world.tenant_a, world.qor_a, world.alice, "Alice's bike is a Brompton")
    form = add_form(world, "Alice's bike is a Moulton")
    assert host.post(f"/admin/memory_app/memory/{memory.pk}/change/", form).status_code == 302

    def search(q):
        return memory_search(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query=q)

    assert search("Brompton") == [] and [m.pk for m in search("Moulton")] == [memory.pk]
    response = host.post("/admin/memory_app/memory/", {"action": "delete_selected", "_selected_action": [memory.pk],
                                                       "post": "yes"})
    assert response.status_code == 302
    assert not Memory.objects.exists() and search("Moulton") == []


def test_the_memory_list_filters_by_tenant_and_a_tenant_admin_sees_only_theirs(client, host, tenant_admin, world):
    remember(world.tenant_a, world.qor_a, world.alice, "acme memory")
    remember(world.tenant_b, world.qor_b, world.charlie, "globex memory")
    page = client.get("/admin/memory_app/memory/").content.decode()
    assert "acme memory" in page and "globex memory" not in page
    host_user = UserFactory(username="host2", is_staff=True, is_superuser=True)
    client.force_login(host_user)
    page = client.get(f"/admin/memory_app/memory/?tenant__id__exact={world.tenant_b.pk}").content.decode()
    assert "globex memory" in page and "acme memory" not in page


def test_file_skills_are_read_only_and_admin_skills_are_the_admins(host, world):
    file_skill = LearnedSkill.objects.create(tenant=None, name="briefing", description="From a file", body="b",
                                             source="file", path="briefing.md", checksum="x")
    page = host.get(f"/admin/memory_app/learnedskill/{file_skill.pk}/change/").content.decode()
    assert 'name="description"' not in page  # read-only
    response = host.post("/admin/memory_app/learnedskill/add/", {
        "tenant": world.tenant_a.pk, "name": "triage", "description": "Sort the inbox", "min_trust": "owner",
        "enabled": "on", "body": "Do it.",
    })
    assert response.status_code == 302
    assert LearnedSkill.objects.get(name="triage").source == "admin"


def test_the_admins_history_keeps_no_memory_text_after_it_is_erased(host, world):
    """The admin's history (django_admin_log) keeps each row's name as it was, forever: a
    memory's name was its text, so "fact: Alice's therapy notes…" outlived clear-memory.
    A memory is named by its type and id; the list still shows its text while it exists."""
    import io

    from django.contrib.admin.models import LogEntry
    from django.core.management import call_command

    assert host.post("/admin/memory_app/memory/add/", add_form(world, "Alice's therapy notes: Tuesdays")
                     ).status_code == 302
    memory = Memory.objects.get()
    assert str(memory) == f"fact #{memory.pk}"
    assert host.post(f"/admin/memory_app/memory/{memory.pk}/change/",
                     add_form(world, "Alice's therapy notes: Thursdays")).status_code == 302
    assert "therapy notes: Thursdays" in host.get("/admin/memory_app/memory/").content.decode()
    call_command("clear_memory", "--user", "alice", "--all", "--yes", stdout=io.StringIO())
    assert not Memory.objects.exists()
    names = list(LogEntry.objects.values_list("object_repr", flat=True))
    assert names == [f"fact #{memory.pk}"] * 2 and not [n for n in names if "therapy" in n]


def test_pending_compacts_are_listed_read_only_and_a_tenant_admin_sees_only_theirs(client, tenant_admin, world):
    """A /compact still waiting for its summary shows in the admin, where the host can see
    one the sweeper keeps queuing again; nobody edits it there."""
    from memory_app.compact_requests import compact_request_record
    from sessions_app.services.resolve import session_resolve

    mine = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    theirs = session_resolve(tenant=world.tenant_b, qor=world.qor_b, channel="web", user=world.charlie)
    compact_request_record(tenant_id=world.tenant_a.pk, session_id=mine.pk, channel="telegram")
    compact_request_record(tenant_id=world.tenant_b.pk, session_id=theirs.pk, channel="web")

    page = tenant_admin.get("/admin/memory_app/compactrequest/")
    assert page.status_code == 200
    listed = page.content.decode()
    assert f"/compact of session #{mine.pk}" in listed and f"/compact of session #{theirs.pk}" not in listed
    assert "telegram" in listed
    assert tenant_admin.get("/admin/memory_app/compactrequest/add/").status_code == 403
    other = CompactRequest.objects.get(session=theirs)
    assert tenant_admin.get(f"/admin/memory_app/compactrequest/{other.pk}/change/").status_code in (302, 404)
    client.force_login(UserFactory(username="host2", is_staff=True, is_superuser=True))
    shown = client.get(f"/admin/memory_app/compactrequest/{other.pk}/change/")
    assert shown.status_code == 200 and 'name="channel"' not in shown.content.decode()
    assert "globex" in shown.content.decode().lower()
