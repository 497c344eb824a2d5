"""A beat given to another person in the admin: it follows their timezone and their names."""
from __future__ import annotations

import pytest
from django.urls import reverse
from django_celery_beat.models import PeriodicTask

from heartbeats_app.models import Heartbeat
from tenancy.services import membership_timezone_set

from ..admin_forms import served_form
from ..factories.heartbeats_app import beat

pytestmark = pytest.mark.django_db


def change_url(pk):
    return reverse("admin:heartbeats_app_heartbeat_change", args=(pk,))


def test_a_beat_given_to_another_owner_runs_at_their_local_time(host, world):
    """Alice's beat with no zone of its own ran at 09:00 Berlin; given to Bob, who lives
    in New York, it says 09:00 New York everywhere and Celery beat must run it then."""
    membership_timezone_set(tenant=world.tenant_a, user=world.alice, timezone="Europe/Berlin")
    membership_timezone_set(tenant=world.tenant_a, user=world.bob, timezone="America/New_York")
    hb = beat(world.qor_a, name="standup", cron="0 9 * * 1-5", owner=world.alice)
    assert PeriodicTask.objects.get(pk=hb.periodic_task_id).crontab.timezone.key == "Europe/Berlin"

    page = host.get(change_url(hb.pk))
    response = host.post(change_url(hb.pk), {**served_form(page), "owner": world.bob.pk})

    assert response.status_code == 302
    hb.refresh_from_db()
    assert hb.owner == world.bob
    assert PeriodicTask.objects.get(pk=hb.periodic_task_id).crontab.timezone.key == "America/New_York"


def test_a_beat_given_to_another_owner_under_a_name_only_its_old_owner_uses_is_saved(host, world):
    """Alice has "brief" and "standup"; "standup" given to Bob and renamed "brief" clashes
    with nothing of Bob's, so it is saved (it was checked against Alice's names)."""
    beat(world.qor_a, name="brief", owner=world.alice)
    hb = beat(world.qor_a, name="standup", owner=world.alice)

    page = host.get(change_url(hb.pk))
    response = host.post(change_url(hb.pk), {**served_form(page), "owner": world.bob.pk, "name": "brief"})

    assert response.status_code == 302
    hb.refresh_from_db()
    assert (hb.owner, hb.name) == (world.bob, "brief")
    assert Heartbeat.objects.filter(owner=world.alice, name="brief").count() == 1


def test_a_workspace_admin_cannot_give_a_members_beat_to_the_workspace_owner(client, world):
    """Now that a new owner is saved: dana, an admin of acme but not its owner, may not
    hand Bob's beat to Alice, who owns acme (an owner's beats are not dana's to make)."""
    from tenancy.models import Membership

    from ..factories.tenancy import MembershipFactory, UserFactory

    dana = UserFactory(username="dana", is_staff=True)
    MembershipFactory(tenant=world.tenant_a, user=dana, role=Membership.Role.ADMIN)
    hb = beat(world.qor_a, name="standup", owner=world.bob)
    client.force_login(dana)

    page = client.get(change_url(hb.pk))
    response = client.post(change_url(hb.pk), {**served_form(page), "owner": world.alice.pk})

    assert response.status_code == 200 and "owner" in response.context["adminform"].form.errors
    hb.refresh_from_db()
    assert hb.owner == world.bob
