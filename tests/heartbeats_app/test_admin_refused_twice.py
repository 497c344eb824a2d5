"""The admin's save of a beat refused by the service on both tries (the form checked, the
save refused, the form checked again, the save refused again): the page comes back with
what the admin typed and the reason, as for one refusal, not a redirect that loses it."""
from __future__ import annotations

import pytest
from django.urls import reverse

from heartbeats_app.models import Heartbeat

from ..admin_forms import served_form
from ..factories.heartbeats_app import beat
from ..factories.tenancy import UserFactory

pytestmark = pytest.mark.django_db


def test_a_save_refused_twice_shows_the_form_again_with_what_was_typed_and_the_reason(client, world):
    """Before, the second refusal redirected to the change page with a message: the prompt
    typed was gone. The refusal on both tries is real, not staged: a beat saved before
    ranges running backwards were refused, its cron stored with two spaces, passes the
    form (its own cron, unchanged) and is refused by the save, which is given the form's
    normalised cron and no longer takes it for the stored one."""
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    client.force_login(root)
    night = beat(world.qor_a, name="night", cron="0 22 * * *", owner=world.bob, prompt="Anything late?")
    Heartbeat.objects.filter(pk=night.pk).update(cron="0  23-2 * * *")  # as saved before the check
    url = reverse("admin:heartbeats_app_heartbeat_change", args=[night.pk])
    form = {**served_form(client.get(url)), "prompt": "Anything late? And the pills."}

    response = client.post(url, form)

    assert response.status_code == 200, (response.status_code, response.get("Location"))
    shown = response.context["adminform"].form
    assert shown["prompt"].value() == "Anything late? And the pills."  # what was typed, kept
    (error,) = shown.non_field_errors()
    assert error.startswith("Not saved, the beat changed meanwhile: ") and "23-2" in error, error
    assert "Not saved, the beat changed meanwhile" in response.content.decode()
    night.refresh_from_db()
    assert (night.prompt, night.cron) == ("Anything late?", "0  23-2 * * *")  # nothing saved
