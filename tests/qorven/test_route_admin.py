"""What /status and the admin show of a Qor's model routes: each route cooling down or
ready, for the key it is called with; and its keys, which are never shown and which the
host alone sets."""
from __future__ import annotations

import pytest

from sessions_app.models import Message
from tenancy.models import Qor

from ..fakes.model_server import error, reply
from .failover_support import primary_and_fallback
from .test_model_endpoints import ask, change_form

pytestmark = pytest.mark.django_db(transaction=True)


def _status_once_the_primary_failed(client, world, route_servers, drain, failure) -> str:
    """/status's answer after a first message the primary failed with `failure` and the
    fallback answered."""
    primary, fallback = route_servers
    primary_and_fallback(world, primary, fallback)
    primary.default = failure
    fallback.default = reply("ok")
    ask(client, world, "first")
    drain()
    ask(client, world, "/status")
    drain()
    return Message.objects.filter(role="assistant").order_by("seq").last().content


def test_status_and_the_admin_show_the_routes_and_their_cooldowns(host, client, world, route_servers, drain):
    status = _status_once_the_primary_failed(client, world, route_servers, drain, error(429, "slow down"))
    assert "main: primary-model — cooling down for" in status
    assert "main fallback 1: fallback-model — ready" in status
    page = host.get(f"/admin/qorven/qor/{world.qor_a.pk}/change/").content.decode()
    assert "main: primary-model — cooling down for" in page  # the Qor's own route
    assert "fallback-model" in page and ">ready<" in page  # the fallback's row


def test_status_shows_a_route_whose_key_was_refused_as_cooling(client, world, route_servers, drain):
    """A refused key cools down that key only; /status read the server's cooldown alone and
    said the route was ready while every turn skipped it."""
    status = _status_once_the_primary_failed(client, world, route_servers, drain, error(401, "bad key"))
    assert "main: primary-model — cooling down for" in status, status


def test_keys_are_write_only_in_the_admin(host, world):
    Qor.objects.filter(pk=world.qor_a.pk).update(main_api_key="sk-stored-secret")
    page = host.get(f"/admin/qorven/qor/{world.qor_a.pk}/change/").content.decode()
    assert "sk-stored-secret" not in page and 'name="main_api_key"' in page and "model_fallbacks-TOTAL_FORMS" in page
    response = host.post(f"/admin/qorven/qor/{world.qor_a.pk}/change/", change_form(world.qor_a, main_api_key=""))
    assert response.status_code == 302
    world.qor_a.refresh_from_db()
    assert world.qor_a.main_api_key == "sk-stored-secret"  # an empty field keeps it
    host.post(f"/admin/qorven/qor/{world.qor_a.pk}/change/", change_form(world.qor_a, main_api_key="-"))
    world.qor_a.refresh_from_db()
    assert world.qor_a.main_api_key == ""  # "-" removes it


def test_a_tenant_admin_neither_sees_nor_sets_keys_and_fallbacks(tenant_admin, world):
    Qor.objects.filter(pk=world.qor_a.pk).update(main_api_key="sk-stored-secret")
    page = tenant_admin.get(f"/admin/qorven/qor/{world.qor_a.pk}/change/").content.decode()
    assert "sk-stored-secret" not in page and "main_api_key" not in page and "model_fallbacks" not in page
    tenant_admin.post(f"/admin/qorven/qor/{world.qor_a.pk}/change/",
                      change_form(world.qor_a, main_api_key="sk-attacker", name="Renamed"))
    world.qor_a.refresh_from_db()
    assert world.qor_a.name == "Renamed" and world.qor_a.main_api_key == "sk-stored-secret"
