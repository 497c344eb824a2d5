"""The chat page and its session-authenticated, CSRF-protected endpoints."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from sessions_app.models import Message

pytestmark = pytest.mark.django_db(transaction=True)

API = "/chat/api/acme/aria/messages"


def test_the_chat_needs_a_login_and_lands_on_the_default_qor(client, world):
    response = client.get("/chat/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/?next=/chat/")
    assert client.get("/").status_code == 302
    login = client.post("/accounts/login/", {"username": "alice", "password": "pw-for-tests-1"})
    assert login.status_code == 302 and login["Location"] == "/chat/"
    assert client.get("/chat/")["Location"] == "/chat/aria/"
    page = client.get("/chat/aria/")
    assert page.status_code == 200
    html = page.content.decode()
    assert '"socket": "/ws/chat/acme/aria/"' in html


def test_the_filter_offers_the_web_the_terminal_and_each_bound_platform_only(client, world, telegram):
    from channels_app.services import binding_create

    binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="slack", credentials={
        "app_id": "A9", "bot_token": "xoxb-globex", "signing_secret": "s"})  # another tenant's
    discord = binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="discord", credentials={
        "bot_token": "d", "public_key": "00" * 32, "application_id": "1"})
    discord.enabled = False
    discord.save()
    client.force_login(world.alice)

    chips = client.get("/chat/aria/").context["channels"]

    assert [value for value, _ in chips] == ["web", "tui", "telegram"]


def test_a_user_never_reaches_another_tenants_chat(client, world):
    client.force_login(world.charlie)
    # charlie's own "aria" is globex's; acme's is out of reach, page and API alike
    assert client.get("/chat/aria/").context["owner"].tenant == world.tenant_b
    assert client.get("/chat/aria/?tenant=acme").status_code == 404
    assert client.get(API).status_code == 404
    assert client.post(API, data=json.dumps({"content": "hi"}), content_type="application/json").status_code == 404
    assert not Message.objects.exists()


def test_sending_from_the_page_needs_the_csrf_token_and_lands_on_channel_web(world, drain):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(world.alice)
    page = browser.get("/chat/aria/")
    body = json.dumps({"content": "hello from the page"})
    assert browser.post(API, data=body, content_type="application/json").status_code == 403
    token = page.cookies["csrftoken"].value
    response = browser.post(API, data=body, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 201
    message = response.json()["message"]
    assert (message["seq"], message["channel"], message["role"]) == (1, "web", "user")
    drain()
    assert Message.objects.get(seq=1).sender_name == "Alice"
    empty = browser.post(API, data=json.dumps({"content": "  "}), content_type="application/json",
                         HTTP_X_CSRFTOKEN=token)
    assert empty.status_code == 400


def test_the_api_answers_401_without_a_login(client, world):
    assert client.get(API).status_code == 401


def test_the_browsers_favicon_request_finds_the_icon(client, db):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("qorven/favicon.svg")


def test_earlier_conversations_are_listed_and_readable_by_their_owner_only(client, world):
    from sessions_app.services import message_append, session_resolve, session_rotate

    def talk(user, text):
        session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=user)
        message_append(session=session, role="user", content=text, channel="web", sender_name="x", notify=False)
        return session

    first = talk(world.alice, "plan the trip to Lisbon")
    session_rotate(session=first)  # /clear
    second = talk(world.alice, "what about Porto?")
    session_rotate(session=second)
    talk(world.alice, "today's list")  # the active one: not an earlier conversation
    bobs = talk(world.bob, "bob's secret")
    session_rotate(session=bobs)
    client.force_login(world.alice)

    listed = client.get("/chat/api/acme/aria/conversations").json()["conversations"]
    assert [(c["session_id"], c["opening"], c["messages"]) for c in listed] == [
        (second.pk, "what about Porto?", 1), (first.pk, "plan the trip to Lisbon", 1)]

    read = client.get(f"{API}?session={first.pk}").json()
    assert read["archived"] is True and [m["content"] for m in read["messages"]] == ["plan the trip to Lisbon"]
    assert client.get(f"{API}?session={bobs.pk}").status_code == 404  # bob's, in the same tenant
    client.force_login(world.charlie)
    assert client.get("/chat/api/acme/aria/conversations").status_code == 404
