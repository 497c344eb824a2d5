"""The admin's save of a beat when the service refuses what the form checked: something
changed between the two (another request took the name). The form comes back with the
reason, as it does when the form itself refuses, not a server error."""
from __future__ import annotations

import pytest
from django.db import transaction
from django.urls import reverse

from heartbeats_app.models import Heartbeat

from ..admin_forms import served_form
from ..agent.test_rotation_races import blocked_on_a_row_lock, in_thread
from ..factories.heartbeats_app import beat
from ..factories.tenancy import UserFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # Row locks: the save waits on the beat's row while the other request commits.
    pytest.mark.skipif("__import__('django.conf').conf.settings.DATABASES['default']['ENGINE'].endswith('sqlite3')",
                       reason="needs PostgreSQL's row locks to hold the save between its form and its write"),
]


def _name_taken(world):
    beat(world.qor_a, name="news", owner=world.bob, prompt="Bob's own news")  # e.g. by set_beat


def _recipient_deactivated(world):
    world.alice.is_active = False
    world.alice.save(update_fields=["is_active"])


@pytest.mark.parametrize("change, meanwhile, field, says", [
    ({"name": "news"}, _name_taken, "name", "bob already has a beat named 'news'; pick another name"),
    ({"deliver_to": "alice", "deliver_channel": "web"}, _recipient_deactivated, "deliver_to",
     "alice is deactivated: nothing is delivered to a deactivated account; choose someone active, or no delivery"),
])
def test_a_beat_changed_meanwhile_shows_the_admin_form_again_with_the_reason(client, world, change, meanwhile,
                                                                               field, says):
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    client.force_login(root)
    brief = beat(world.qor_a, name="brief", owner=world.bob)
    url = reverse("admin:heartbeats_app_heartbeat_change", args=[brief.pk])
    people = {"alice": world.alice.pk}
    form = {**served_form(client.get(url)), **{k: people.get(v, v) for k, v in change.items()}}

    with transaction.atomic():
        # Another writer of the beat holds its row (as heartbeat_update does) while the admin
        # posts: the form finds the change fine, then the save waits for the row.
        Heartbeat.objects.select_for_update().get(pk=brief.pk)
        posted = in_thread(client.post, url, form)
        blocked_on_a_row_lock()
        meanwhile(world)
    response = posted()

    assert response.status_code == 200, response.status_code
    assert response.context["adminform"].form.errors[field] == [says]
    brief.refresh_from_db()
    assert (brief.name, brief.deliver_to) == ("brief", None)
