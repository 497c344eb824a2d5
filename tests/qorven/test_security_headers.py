"""The headers every answer carries against script injection, clickjacking and leaks:
a Content-Security-Policy on each page we render (scripts only from our own files, the
page's WebSocket, no framing but the webchat's, by its binding's sites), a
Permissions-Policy, a Referrer-Policy and nosniff, on pages, the admin, the webchat,
static files, the JSON API, probes and webhooks alike."""
from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest

from channels_app.models import ChannelBinding
from channels_app.services import binding_create
from tenancy.services import api_token_create

from ..factories.tenancy import QorFactory, UserFactory

WEBCHAT_KEY = "wc_headerskey"
DENIED_FEATURES = ("camera", "microphone", "geolocation", "payment", "usb")


def policy(response) -> dict[str, list[str]]:
    """The response's Content-Security-Policy, directive → its sources."""
    directives = {}
    for part in response["Content-Security-Policy"].split(";"):
        if part.strip():
            name, *sources = part.split()
            assert name not in directives, f"{name} twice in {response['Content-Security-Policy']}"
            directives[name] = sources
    return directives


def the_common_headers(response, *, referrer: str = "same-origin") -> None:
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == referrer
    features = dict(item.strip().split("=", 1) for item in response["Permissions-Policy"].split(","))
    assert all(features[feature] == "()" for feature in DENIED_FEATURES), features


def strict_page(response, *, host: str = "testserver") -> dict[str, list[str]]:
    """What every page of ours allows: its own files, its own socket, attachments shown
    from blobs; no inline script, no plugin, no other base or form target."""
    directives = policy(response)
    assert directives["default-src"] == ["'self'"]
    assert directives["script-src"] == ["'self'"]
    assert directives["connect-src"] == ["'self'", f"ws://{host}", f"wss://{host}"]
    assert directives["img-src"] == ["'self'", "data:", "blob:"]
    assert directives["media-src"] == ["'self'", "blob:"]
    assert directives["object-src"] == ["'none'"]
    assert directives["base-uri"] == ["'none'"]
    assert directives["form-action"] == ["'self'"]
    the_common_headers(response, referrer=response["Referrer-Policy"])
    return directives


def inline_code(html: str) -> list[str]:
    """The inline scripts (other than JSON data) and inline event handlers of a page."""
    scripts = [tag for tag in re.findall(r"<script\b[^>]*>", html)
               if "src=" not in tag and 'type="application/json"' not in tag]
    return scripts + re.findall(r"<[^>]*\son[a-z]+=[^>]*>", html)


@pytest.fixture
def webchat(world):
    return binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                          credentials={"key": WEBCHAT_KEY, "secret": "s", "origins": "https://shop.example"})


def asgi_get(path: str, **headers: str) -> httpx.Response:
    """GET through `qorven serve`'s whole ASGI application (static files, webhooks and
    probes answer outside Django's views)."""
    from qorven.asgi import application

    async def run() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application),
                                     base_url="http://testserver") as client:
            return await client.get(path, headers=headers)

    return asyncio.run(run())


def test_the_chat_page_runs_only_its_own_scripts_and_cannot_be_framed(client, world):
    QorFactory(tenant=world.tenant_a, slug="iris", name="Iris", is_default=False)  # the switcher shows
    client.force_login(world.alice)
    page = client.get("/chat/aria/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'class="switcher"' in html
    directives = strict_page(page)
    assert directives["style-src"] == ["'self'"]
    assert directives["frame-ancestors"] == ["'none'"]
    assert page["X-Frame-Options"] == "DENY"
    assert page["Referrer-Policy"] == "same-origin"
    assert inline_code(html) == []


def test_the_socket_source_is_the_host_the_page_was_asked_at(client, world, settings):
    settings.ALLOWED_HOSTS = ["chat.acme.example"]
    client.force_login(world.alice)
    page = client.get("/chat/aria/", HTTP_HOST="chat.acme.example")
    strict_page(page, host="chat.acme.example")


def test_the_sign_in_pages_are_strict_too(client, world):
    for path in ("/accounts/login/", "/chat/"):  # /chat/ signed out: the sign-in page
        page = client.get(path, follow=True)
        assert page.status_code == 200 and 'name="password"' in page.content.decode()
        assert strict_page(page)["frame-ancestors"] == ["'none'"]
        assert inline_code(page.content.decode()) == []
    client.force_login(UserFactory(username="dora"))  # a member of nothing
    no_chat = client.get("/chat/")
    assert no_chat.status_code == 404 and strict_page(no_chat)["style-src"] == ["'self'"]


def test_the_admin_allows_inline_styles_but_no_inline_script(client, host):
    for path in ("/admin/", "/admin/qorven/tenant/", "/admin/heartbeats_app/heartbeat/",
                 "/admin/django_celery_beat/periodictask/add/"):
        page = host.get(path)
        assert page.status_code == 200, path
        directives = strict_page(page)
        assert directives["style-src"] == ["'self'", "'unsafe-inline'"]
        assert directives["frame-ancestors"] == ["'none'"]
        assert page["X-Frame-Options"] == "DENY"
        assert inline_code(page.content.decode()) == [], path
    client.logout()
    login = client.get("/admin/login/")
    assert policy(login)["style-src"] == ["'self'", "'unsafe-inline'"]


def test_the_webchat_frame_may_be_framed_by_its_bindings_sites_only(client, webchat):
    frame = client.get(f"/webchat/{WEBCHAT_KEY}/frame")
    assert frame.status_code == 200
    directives = strict_page(frame)
    assert directives["frame-ancestors"] == ["https://shop.example"]
    assert directives["style-src"] == ["'self'"]
    assert "X-Frame-Options" not in frame
    assert frame["Referrer-Policy"] == "no-referrer"
    assert inline_code(frame.content.decode()) == []


def test_a_webchat_with_no_sites_named_may_be_framed_anywhere(client, world):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat", credentials={"key": "wc_any", "secret": "s"})
    assert policy(client.get("/webchat/wc_any/frame"))["frame-ancestors"] == ["*"]


def test_a_stored_origin_cannot_add_sources_to_the_frames_policy(client, webchat):
    # Stored before the binding's origins were checked (or written around the check).
    credentials = {**webchat.credentials, "origins": "https://shop.example; script-src * 'unsafe-inline' https://b.example"}
    ChannelBinding.objects.filter(pk=webchat.pk).update(credentials=credentials)
    directives = policy(client.get(f"/webchat/{WEBCHAT_KEY}/frame"))
    assert directives["frame-ancestors"] == ["https://b.example"]
    assert directives["script-src"] == ["'self'"]
    # Sites named, none of them one: framed nowhere, not anywhere.
    ChannelBinding.objects.filter(pk=webchat.pk).update(credentials={**credentials, "origins": "'self' data:"})
    assert policy(client.get(f"/webchat/{WEBCHAT_KEY}/frame"))["frame-ancestors"] == ["'none'"]


def test_the_webchat_script_and_the_json_api_are_never_sniffed_nor_framed(client, world, webchat):
    script = client.get(f"/webchat/{WEBCHAT_KEY}.js")
    assert script.status_code == 200 and script["Content-Type"].startswith("text/javascript")
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    api = client.get("/v1/qors/aria/messages", HTTP_AUTHORIZATION=f"Bearer {token}")
    client.force_login(world.alice)
    page_json = client.get("/chat/api/acme/aria/messages")
    missing = client.get("/v1/nothing-here")
    for response in (script, api, page_json, missing):
        if response is not script:
            assert response["Content-Type"] == "application/json", response.content
        assert policy(response) == {"default-src": ["'none'"], "frame-ancestors": ["'none'"]}
        the_common_headers(response)


@pytest.mark.django_db(transaction=True)
def test_static_files_probes_and_webhooks_carry_the_headers_too(world):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    script = asgi_get("/static/qorven/chat.js")
    missing = asgi_get("/static/qorven/nothing.js")  # Django's 404 page, made by the static handler
    assert (script.status_code, missing.status_code) == (200, 404)
    for response in (script, missing):
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "same-origin"
        assert response.headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"
    probe = asgi_get("/healthz", host="10.0.0.7")  # a probe by address, answered before the host check
    assert probe.status_code == 200
    assert probe.headers["X-Content-Type-Options"] == "nosniff"
    assert probe.headers["Referrer-Policy"] == "same-origin"

    from qorven.asgi import application

    async def post() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application),
                                     base_url="http://testserver") as client:
            return await client.post("/v1/webhooks/telegram", content=json.dumps({"update_id": 1}),
                                     headers={"content-type": "application/json",
                                              "x-telegram-bot-api-secret-token": "tg-secret-a"})

    hook = asyncio.run(post())
    assert hook.status_code == 200
    assert hook.headers["X-Content-Type-Options"] == "nosniff"
    assert hook.headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"


def test_djangos_debug_pages_keep_their_inline_styles(client, world, settings):
    settings.DEBUG = True
    client.force_login(world.alice)
    missing = client.get("/chat/nosuchqor/")
    assert missing.status_code == 404 and "<style" in missing.content.decode()
    assert "Content-Security-Policy" not in missing
    assert missing["X-Content-Type-Options"] == "nosniff"
