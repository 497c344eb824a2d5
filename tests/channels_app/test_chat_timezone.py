"""A person's own timezone from the chat page (signed in, CSRF-protected) and the JSON API
(bearer token): read it, set it, go back to the workspace's, in the words `/timezone`
says; only ever their own membership in the page's (or the token's) tenant."""
from __future__ import annotations

import json

import pytest
from django.test import Client
from django_celery_beat.models import PeriodicTask

from tenancy.models import Membership
from tenancy.services import api_token_create

from ..factories.heartbeats_app import beat
from ..factories.tenancy import MembershipFactory

pytestmark = pytest.mark.django_db(transaction=True)

PAGE_API = "/chat/api/{}/aria/timezone"
API = "/v1/timezone"


def zone_of(tenant, user) -> str:
    return Membership.objects.get(tenant=tenant, user=user).timezone


def put(client, url, body, **headers):
    return client.put(url, data=json.dumps(body), content_type="application/json", **headers)


def signed_in(user) -> tuple[Client, str]:
    """A browser signed in as `user` that enforces CSRF, and the token its page gave it."""
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    page = browser.get("/chat/aria/")
    assert page.status_code == 200
    return browser, page.cookies["csrftoken"].value


def test_the_page_tells_its_script_the_persons_and_the_workspaces_timezone(client, world):
    world.tenant_a.timezone = "America/New_York"
    world.tenant_a.save(update_fields=["timezone"])
    client.force_login(world.alice)
    config = client.get("/chat/aria/").context["config"]
    assert config["timezone"] == PAGE_API.format("acme")
    assert (config["zoneOwn"], config["zoneWorkspace"]) == ("", "America/New_York")

    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).update(timezone="Europe/Paris")
    config = client.get("/chat/aria/").context["config"]
    assert (config["zoneOwn"], config["zoneWorkspace"]) == ("Europe/Paris", "America/New_York")


def test_setting_it_from_the_page_needs_the_csrf_token_and_answers_what_timezone_says(world):
    world.tenant_a.timezone = "Europe/Paris"
    world.tenant_a.save(update_fields=["timezone"])
    hers = beat(world.qor_a, name="morning", owner=world.alice)
    browser, token = signed_in(world.alice)
    url = PAGE_API.format("acme")

    refused = put(browser, url, {"timezone": "Asia/Tokyo"})
    assert refused.status_code == 403 and "security token" in refused.json()["error"]
    assert zone_of(world.tenant_a, world.alice) == ""

    done = put(browser, url, {"timezone": "asia/tokyo"}, HTTP_X_CSRFTOKEN=token)
    assert done.status_code == 200
    body = done.json()
    assert body["message"].startswith("Your timezone is now Asia/Tokyo (it is ")
    assert body["message"].endswith(" 1 of your heartbeats now runs in it.")
    assert (body["timezone"], body["workspace"], body["zone"], body["beats_moved"]) == (
        "Asia/Tokyo", "Europe/Paris", "Asia/Tokyo", 1)
    assert zone_of(world.tenant_a, world.alice) == "Asia/Tokyo"
    assert str(PeriodicTask.objects.get(pk=hers.periodic_task_id).crontab.timezone) == "Asia/Tokyo"

    read = browser.get(url).json()
    assert (read["timezone"], read["workspace"], read["zone"]) == ("Asia/Tokyo", "Europe/Paris", "Asia/Tokyo")
    assert "Europe/Paris" in read["zones"] and "America/Argentina/Buenos_Aires" in read["zones"]
    assert "localtime" not in read["zones"] and read["zones"] == sorted(read["zones"])

    back = put(browser, url, {"timezone": ""}, HTTP_X_CSRFTOKEN=token)
    assert back.status_code == 200
    assert back.json()["message"] == ("You now follow the workspace's timezone, Europe/Paris. "
                                      "1 of your heartbeats now runs in it.")
    assert zone_of(world.tenant_a, world.alice) == ""


# The files of the tz database that are no zone a person picks: this machine's own clock
# ("localtime"), tzdata's "zone not set" ("Factory"), and the rule file and copies of every
# zone beside the real ones (posixrules, right/…, posix/…).
NOT_ZONES = ["localtime", "Factory", "posixrules", "right/UTC", "posix/Europe/Paris", "right/Europe/Paris"]


@pytest.mark.parametrize("asked", ["Mars/Olympus", "../../etc/passwd", "Europe/Paris\x00", "Europe",
                                   "Europe/" + "x" * 300, *NOT_ZONES])
def test_a_zone_the_server_does_not_know_is_refused_and_nothing_changes(world, asked):
    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).update(timezone="Europe/Paris")
    browser, token = signed_in(world.alice)
    refused = put(browser, PAGE_API.format("acme"), {"timezone": asked}, HTTP_X_CSRFTOKEN=token)
    assert refused.status_code == 400
    shown = asked if len(asked) <= 64 else asked[:64] + "…"
    assert refused.json()["error"] == (f"I don't know the timezone {shown!r}. Use an IANA name such as "
                                       "Europe/Paris, America/New_York or Asia/Tokyo.")
    assert zone_of(world.tenant_a, world.alice) == "Europe/Paris"


@pytest.mark.parametrize("asked", ["UTC", "US/Eastern", "Asia/Calcutta", "Etc/GMT+5", "America/Argentina/Buenos_Aires"])
def test_a_zones_canonical_name_or_a_common_alias_is_taken(world, asked):
    browser, token = signed_in(world.alice)
    done = put(browser, PAGE_API.format("acme"), {"timezone": asked}, HTTP_X_CSRFTOKEN=token)
    assert done.status_code == 200 and done.json()["message"].startswith(f"Your timezone is now {asked} (it is ")
    assert zone_of(world.tenant_a, world.alice) == asked


@pytest.mark.parametrize("body", [{"zone": "Asia/Tokyo"}, {"timezone": 7}, ["Asia/Tokyo"]])
def test_a_body_without_a_timezone_name_is_refused(world, body):
    browser, token = signed_in(world.alice)
    refused = put(browser, PAGE_API.format("acme"), body, HTTP_X_CSRFTOKEN=token)
    assert refused.status_code == 400 and '"timezone"' in refused.json()["error"]
    assert zone_of(world.tenant_a, world.alice) == ""


def test_bob_sets_only_his_own_timezone_and_a_foreign_tenant_is_not_found(world):
    bob, bob_token = signed_in(world.bob)
    done = put(bob, PAGE_API.format("acme"), {"timezone": "Asia/Tokyo", "user": world.alice.pk,
                                              "username": "alice"}, HTTP_X_CSRFTOKEN=bob_token)
    assert done.status_code == 200
    assert zone_of(world.tenant_a, world.bob) == "Asia/Tokyo"
    assert zone_of(world.tenant_a, world.alice) == ""
    assert bob.get(PAGE_API.format("acme")).json()["timezone"] == "Asia/Tokyo"

    charlie = Client(enforce_csrf_checks=True)  # globex's owner, not a member of acme
    charlie.force_login(world.charlie)
    page = charlie.get("/chat/aria/")  # globex's aria
    token = page.cookies["csrftoken"].value
    assert charlie.get(PAGE_API.format("acme")).status_code == 404
    foreign = put(charlie, PAGE_API.format("acme"), {"timezone": "Europe/Oslo"}, HTTP_X_CSRFTOKEN=token)
    assert foreign.status_code == 404 and foreign.json() == {"error": "no such chat"}
    assert zone_of(world.tenant_a, world.alice) == "" and zone_of(world.tenant_a, world.bob) == "Asia/Tokyo"
    assert not Membership.objects.filter(tenant=world.tenant_a, user=world.charlie).exists()
    assert zone_of(world.tenant_b, world.charlie) == ""


def test_signed_out_the_endpoint_answers_401_and_other_methods_405(client, world):
    assert client.get(PAGE_API.format("acme")).status_code == 401
    client.force_login(world.alice)
    refused = client.post(PAGE_API.format("acme"), data="{}", content_type="application/json")
    assert refused.status_code == 405 and refused["Allow"] == "GET, PUT"


def auth(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def test_the_api_reads_and_sets_the_callers_timezone(client, world):
    world.tenant_a.timezone = "Europe/Paris"
    world.tenant_a.save(update_fields=["timezone"])
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]

    read = client.get(API, **auth(token)).json()
    assert (read["timezone"], read["workspace"], read["zone"]) == ("", "Europe/Paris", "Europe/Paris")
    assert read["message"].startswith("You follow the workspace's timezone, Europe/Paris")

    done = put(client, API, {"timezone": "America/New_York"}, **auth(token))
    assert done.status_code == 200 and done.json()["message"].startswith("Your timezone is now America/New_York")
    assert zone_of(world.tenant_a, world.alice) == "America/New_York"

    refused = put(client, API, {"timezone": "Mars/Olympus"}, **auth(token))
    assert refused.status_code == 400 and "IANA" in refused.json()["error"]
    assert zone_of(world.tenant_a, world.alice) == "America/New_York"

    back = put(client, API, {"timezone": "workspace"}, **auth(token))
    assert back.json()["message"] == "You now follow the workspace's timezone, Europe/Paris."
    assert zone_of(world.tenant_a, world.alice) == ""

    assert client.get(API).status_code == 401
    assert client.post(API, **auth(token)).status_code == 405


def test_a_token_of_one_tenant_never_touches_the_persons_timezone_in_another(client, world):
    MembershipFactory(tenant=world.tenant_b, user=world.alice)  # alice is in both
    token_a = api_token_create(tenant=world.tenant_a, user=world.alice)[1]

    assert put(client, API, {"timezone": "Asia/Tokyo"}, **auth(token_a)).status_code == 200
    assert zone_of(world.tenant_a, world.alice) == "Asia/Tokyo"
    assert zone_of(world.tenant_b, world.alice) == ""

    for foreign in (client.get(API + "?tenant=globex", **auth(token_a)),
                    put(client, API + "?tenant=globex", {"timezone": "Europe/Oslo"}, **auth(token_a))):
        assert foreign.status_code == 404 and foreign.json() == {"error": "no tenant 'globex'"}
    assert zone_of(world.tenant_b, world.alice) == ""
    assert zone_of(world.tenant_a, world.alice) == "Asia/Tokyo"
    assert client.get(API + "?tenant=acme", **auth(token_a)).json()["timezone"] == "Asia/Tokyo"
