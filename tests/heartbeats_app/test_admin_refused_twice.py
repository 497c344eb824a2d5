"""The admin's save of a beat refused by the service on both tries (the form checked, the
save refused, the form checked again, the save refused again): the page comes back with
what the admin typed and the reason, as for one refusal, not a redirect that loses it."""
from __future__ import annotations

import pytest
from django.db import connection
from django.urls import reverse
from psycopg import pq

from heartbeats_app.models import Heartbeat
from heartbeats_app.services import heartbeat_update

from ..admin_forms import served_form
from ..agent.test_rotation_races import in_thread
from ..factories.heartbeats_app import beat
from ..factories.tenancy import UserFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # Another writer commits on a connection of its own while the admin's try is under way:
    # SQLite's shared test database refuses a write while a transaction reads it.
    pytest.mark.skipif("__import__('django.conf').conf.settings.DATABASES['default']['ENGINE'].endswith('sqlite3')",
                       reason="needs PostgreSQL's concurrent writers beside the admin's open transaction"),
]


def no_transaction_open(db) -> bool:
    """Whether the server has no transaction open on `db`: the admin's first try rolled
    back, and the next query begins the second (each try is a transaction of its own)."""
    return db.connection.info.transaction_status == pq.TransactionStatus.IDLE


def test_a_save_refused_twice_shows_the_form_again_with_what_was_typed_and_the_reason(client, world):
    """Before, the second refusal redirected to the change page with a message: the prompt
    typed was gone. Both refusals are real: the admin renames a beat "news" while Bob's Qor
    (update_beat, committed on a connection of its own) renames his own beat to "news" just
    as the save is about to lock the beat, gives the name back before the admin's second
    try, and takes it again as that try's save is about to lock the beat."""
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    client.force_login(root)
    brief = beat(world.qor_a, name="brief", cron="0 8 * * *", owner=world.bob, prompt="Anything new?")
    bobs = beat(world.qor_a, name="headlines", cron="0 9 * * *", owner=world.bob, prompt="Headlines")
    url = reverse("admin:heartbeats_app_heartbeat_change", args=[brief.pk])
    form = {**served_form(client.get(url)), "name": "news", "prompt": "Anything new? And the weather."}
    renamed: list[str] = []

    def bobs_qor_renames(name: str) -> None:
        in_thread(heartbeat_update, heartbeat=bobs, name=name)()
        renamed.append(name)

    def meanwhile(execute, sql, params, many, context):
        if 'FROM "heartbeats_app_heartbeat"' in sql and "FOR UPDATE" in sql:  # a try's save locks the beat
            bobs_qor_renames("news")
        elif renamed == ["news"] and no_transaction_open(context["connection"]):  # the second try begins
            bobs_qor_renames("headlines")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(meanwhile):
        response = client.post(url, form)

    assert renamed == ["news", "headlines", "news"]  # refused, free for the second try's form, refused
    assert response.status_code == 200, (response.status_code, response.get("Location"))
    shown = response.context["adminform"].form
    assert (shown["name"].value(), shown["prompt"].value()) == ("news", "Anything new? And the weather.")  # kept
    taken = "bob already has a beat named 'news'; pick another name"
    assert shown.non_field_errors() == [f"Not saved, the beat changed meanwhile: {taken}"]
    assert shown.errors["name"] == [taken]  # and on its field, as the form checked what is stored now
    assert "Not saved, the beat changed meanwhile" in response.content.decode()
    brief.refresh_from_db()
    assert (brief.name, brief.prompt) == ("brief", "Anything new?")  # nothing saved
    assert sorted(Heartbeat.objects.values_list("name", flat=True)) == ["brief", "news"]
