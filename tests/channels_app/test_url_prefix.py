"""Qorven under a path of a shared host (QORVEN_URL_PREFIX=/qorven): every page, redirect,
form, script, API call and socket of the chat page, the webchat and the admin stays under
the prefix, and the addresses the commands print carry it. Requests come as a proxy sends
them: Django's test client with the prefix as SCRIPT_NAME, the ASGI application with the
path as asked (a proxy that passes it on) or stripped of it."""
from __future__ import annotations

import asyncio
import io
import json
import re

import httpx
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.management import call_command
from django.test import Client

from channels_app.management.commands.chat import SEND_TIMEOUT
from channels_app.models import InboundEvent
from channels_app.services import binding_create
from tenancy.services import api_token_create

from ..factories.tenancy import UserFactory
from .conftest import pair
from .live_helpers import communicator, receive_until, session_cookie
from .payloads import telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "pw-for-tests-1"
# Where a page's markup names a place: links, forms, scripts, styles, images.
ATTRIBUTE = re.compile(r'\b(?:href|src|action)="([^"]*)"')


def prefixed() -> Client:
    """A browser behind the proxy: every request's script name is the prefix."""
    return Client(SCRIPT_NAME="/qorven")


def addresses(html: str) -> list[str]:
    """Every absolute path a page names, in its markup and its JSON config."""
    found = ATTRIBUTE.findall(html)
    if 'id="chat-config"' in html:
        found += [v for v in config_of(html).values() if isinstance(v, str)]
    return [a for a in found if a.startswith("/")]


def config_of(html: str) -> dict:
    return json.loads(re.search(r'<script id="chat-config" type="application/json">(.*?)</script>', html, re.S)[1])


def test_signing_in_under_the_prefix_redirects_within_it_to_the_chat(world, url_prefix):
    client = prefixed()
    assert client.get("/")["Location"] == "/qorven/chat/"
    away = client.get("/chat/")
    assert away.status_code == 302 and away["Location"] == "/qorven/accounts/login/?next=/qorven/chat/"
    form = client.get("/accounts/login/?next=/qorven/chat/").content.decode()
    assert 'action="/qorven/accounts/login/"' in form
    assert all(a.startswith("/qorven/") for a in addresses(form)), addresses(form)
    signed_in = client.post("/accounts/login/", {"username": "alice", "password": PASSWORD,
                                                 "next": "/qorven/chat/"})
    assert signed_in.status_code == 302 and signed_in["Location"] == "/qorven/chat/"
    assert signed_in.cookies["sessionid"]["path"] == "/qorven/"  # not sent to the host's other sites
    assert signed_in.cookies["qorven_device"]["path"] == "/qorven/"
    assert client.get("/chat/")["Location"] == "/qorven/chat/aria/"
    # Without a `next`, the sign-in lands on the chat under the prefix too.
    other = prefixed()
    assert other.post("/accounts/login/", {"username": "alice", "password": PASSWORD})["Location"] == "/qorven/chat/"
    out = client.post("/accounts/logout/")
    assert out.status_code == 302 and out["Location"] == "/qorven/accounts/login/"


# Places on the shared host outside the prefix: other sites, as a browser reads each `next`.
ELSEWHERE = ["/elsewhere/", "/qorven/../elsewhere/", "/qorven/%2e%2e/elsewhere/", "/qorven/..%2Felsewhere/",
             "/qorven/.%2e/elsewhere", "/qorven\\..\\elsewhere/", "/qorvenx/", "http://testserver/elsewhere/"]


@pytest.mark.parametrize("elsewhere", ELSEWHERE)
def test_signing_in_or_out_never_redirects_out_of_the_prefix(world, url_prefix, elsewhere):
    """A link to the sign-in (or a form posting to the sign-out) whose `next` leads to
    another site of the shared host lands under the prefix: the host's other paths are
    other sites, which the cookies are kept from, not pages of ours."""
    UserFactory(username="root", is_staff=True, is_superuser=True)
    client = prefixed()
    signed_in = client.post("/accounts/login/", {"username": "alice", "password": PASSWORD, "next": elsewhere})
    assert signed_in.status_code == 302 and signed_in["Location"] == "/qorven/chat/"
    again = client.get("/accounts/login/", {"next": elsewhere})  # signed in already: redirected at once
    assert again.status_code == 302 and again["Location"] == "/qorven/chat/"
    out = client.post("/accounts/logout/", {"next": elsewhere})
    assert out.status_code == 302 and out["Location"] == "/qorven/accounts/login/"
    admin = prefixed()
    signed_in = admin.post("/admin/login/", {"username": "root", "password": PASSWORD, "next": elsewhere})
    assert signed_in.status_code == 302 and signed_in["Location"] == "/qorven/admin/"
    out = admin.post("/admin/logout/", {"next": elsewhere})
    assert out.status_code in (200, 302) and out.get("Location", "/qorven/admin/") == "/qorven/admin/"


def test_a_next_under_the_prefix_is_followed(world, url_prefix):
    client = prefixed()
    signed_in = client.post("/accounts/login/", {"username": "alice", "password": PASSWORD,
                                                 "next": "/qorven/chat/aria/?filter=telegram"})
    assert signed_in["Location"] == "/qorven/chat/aria/?filter=telegram"
    assert client.get("/accounts/login/", {"next": "/qorven/admin/"})["Location"] == "/qorven/admin/"


def test_the_chat_page_names_only_places_under_the_prefix(world, url_prefix):
    client = prefixed()
    client.force_login(world.alice)
    page = client.get("/chat/aria/")
    assert page.status_code == 200
    html = page.content.decode()
    config = config_of(html)
    assert config["socket"] == "/qorven/ws/chat/acme/aria/"
    assert config["messages"] == "/qorven/chat/api/acme/aria/messages"
    assert config["images"] == "/qorven/chat/api/acme/aria/images/"
    assert config["signIn"] == "/qorven/accounts/login/"
    assert '<script src="/qorven/static/qorven/chat.js">' in html
    assert '<link rel="stylesheet" href="/qorven/static/qorven/chat.css">' in html
    named = addresses(html)
    assert len(named) > 10 and all(a.startswith("/qorven/") for a in named), named
    # The strict policy stays: scripts from our own files only, the socket on this host.
    policy = page["Content-Security-Policy"]
    assert "script-src 'self';" in policy and "connect-src 'self' ws://testserver wss://testserver;" in policy


def test_the_chat_pages_calls_answer_under_the_prefix(world, url_prefix):
    client = prefixed()
    client.force_login(world.alice)
    config = config_of(client.get("/chat/aria/").content.decode())
    path = config["messages"].removeprefix("/qorven")
    sent = client.post(path, json.dumps({"content": "hello from under a path"}), content_type="application/json",
                       HTTP_X_CSRFTOKEN=config["csrfToken"])
    assert sent.status_code == 201, sent.content
    assert client.get(path).json()["messages"][0]["content"] == "hello from under a path"
    # A refused token is the JSON endpoint's refusal (the page reads it), under the prefix too.
    refused = Client(SCRIPT_NAME="/qorven", enforce_csrf_checks=True)
    refused.force_login(world.alice)
    answer = refused.post(path, json.dumps({"content": "x"}), content_type="application/json")
    assert answer.status_code == 403 and "reload the page" in answer.json()["error"]
    assert prefixed().get("/v1/nothing-here").json()["error"].startswith("no such endpoint")


def test_the_webchat_loader_frame_and_socket_are_under_the_prefix(world, url_prefix):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                   credentials={"key": "wc_prefixed", "secret": "wc-secret"})
    loader = prefixed().get("/webchat/wc_prefixed.js").content.decode()
    assert 'var frameUrl = "http://testserver/qorven/webchat/wc_prefixed/frame"' in loader
    frame = prefixed().get("/webchat/wc_prefixed/frame")
    html = frame.content.decode()
    config = config_of(html)
    assert config["socket"] == "/qorven/ws/webchat/wc_prefixed/"
    assert config["messages"] == "/qorven/webchat/wc_prefixed/messages"
    assert config["images"] == "/qorven/webchat/wc_prefixed/images/"
    assert all(a.startswith("/qorven/") for a in addresses(html)), addresses(html)


def test_the_admin_under_the_prefix(world, url_prefix, host):
    client = prefixed()
    away = client.get("/admin/")
    assert away.status_code == 302 and away["Location"] == "/qorven/admin/login/?next=/qorven/admin/"
    client.cookies = host.cookies  # the host, signed in
    index = client.get("/admin/")
    html = index.content.decode()
    assert index.status_code == 200 and 'href="/qorven/admin/qorven/tenant/"' in html
    assert '<a href="/qorven">View site</a>' in html  # Django's admin: the script name
    named = addresses(html)
    assert all(a == "/qorven" or a.startswith("/qorven/") for a in named), named
    # Its lists keep their inline styles (a beat's status colour): the admin is known by its path.
    assert "style-src 'self' 'unsafe-inline'" in index["Content-Security-Policy"]


def test_the_chat_socket_opens_under_the_prefix_and_streams_a_reply(world, url_prefix, model_server, drain):
    from ..fakes.model_server import reply

    model_server.add(reply("Streamed under a path.", delay=0.3))
    cookie = session_cookie(world.alice)
    client = prefixed()
    client.force_login(world.alice)
    config = config_of(client.get("/chat/aria/").content.decode())

    def post(text: str) -> int:
        return client.post(config["messages"].removeprefix("/qorven"), json.dumps({"content": text}),
                           content_type="application/json", HTTP_X_CSRFTOKEN=config["csrfToken"]).status_code

    async def scenario():
        page = communicator(config["socket"], cookie=cookie)
        connected, _ = await page.connect()
        assert connected
        assert (await page.receive_json_from())["type"] == "session"
        assert await sync_to_async(post)("hi") == 201
        events = await receive_until(page, lambda e: e["type"] == "message.done")
        assert "".join(e["delta"] for e in events if e["type"] == "message.chunk") == "Streamed under a path."
        await page.disconnect()
        # A proxy that strips the prefix reaches the same socket.
        stripped = communicator("/ws/chat/acme/aria/", cookie=cookie)
        assert (await stripped.connect())[0]
        await stripped.disconnect()

    async_to_sync(scenario)()
    drain()


def test_a_webchat_visitor_writes_and_hears_under_the_prefix(world, url_prefix, drain):
    import time

    from channels_app.webchat import webchat_token_sign

    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                   credentials={"key": "wc_prefixed", "secret": "wc-secret"})
    token = webchat_token_sign(secret="wc-secret", user_id="alice", expires=int(time.time()) + 600)
    config = config_of(prefixed().get("/webchat/wc_prefixed/frame").content.decode())

    def write(text: str) -> int:
        return prefixed().post(config["messages"].removeprefix("/qorven"), json.dumps({"content": text}),
                               content_type="application/json", HTTP_X_QORVEN_VISITOR=token).status_code

    async def scenario():
        visitor = communicator(f"{config['socket']}?visitor={token}")
        assert (await visitor.connect())[0]
        await receive_until(visitor, lambda e: e["type"] == "session")
        assert await sync_to_async(write)("typed in the bubble") == 201
        events = await receive_until(visitor, lambda e: e.get("content") == "typed in the bubble")
        assert events[-1]["channel"] == "webchat"
        await visitor.disconnect()

    async_to_sync(scenario)()
    drain()


def asgi(*requests: tuple[str, str, bytes, dict[str, str]], root_path: str = "") -> list[httpx.Response]:
    """(method, path, body, headers) to the ASGI application, as a proxy passes them on
    (`root_path`: the one the server put in the scope)."""
    from qorven.asgi import application, steady_threads

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=application, root_path=root_path)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return [await client.request(method, path, content=body, headers=headers)
                    for method, path, body, headers in requests]

    try:
        return asyncio.run(run())
    finally:
        steady_threads.connections_close()


def test_webhooks_and_the_api_answer_through_the_server_under_the_prefix(world, url_prefix, telegram, platform,
                                                                        model_server, drain):
    from ..fakes.model_server import reply

    model_server.default = reply("Noted.")
    pair(world, "telegram", "42", world.alice)
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    hook = {"content-type": "application/json", "x-telegram-bot-api-secret-token": "tg-secret-a"}
    bearer = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    passed, stripped, posted, listed = asgi(
        ("POST", "/qorven/v1/webhooks/telegram", json.dumps(telegram_update("one", message_id=1)).encode(), hook),
        ("POST", "/v1/webhooks/telegram", json.dumps(telegram_update("two", message_id=2)).encode(), hook),
        ("POST", "/qorven/v1/qors/aria/messages", json.dumps({"content": "by the API"}).encode(), bearer),
        ("GET", "/qorven/v1/qors/aria/messages", b"", bearer),
    )
    assert passed.json() == stripped.json() == {"ok": True}
    assert InboundEvent.objects.count() == 2
    assert posted.status_code == 201 and listed.status_code == 200
    drain()


def test_the_pages_answer_through_the_server_as_the_proxy_sends_them(world, url_prefix):
    bare, root, stripped, chat, probe = asgi(
        ("GET", "/qorven", b"", {}),
        ("GET", "/qorven/", b"", {}),
        ("GET", "/chat/", b"", {}),
        ("GET", "/qorven/chat/", b"", {}),
        ("GET", "/healthz", b"", {}),
    )
    assert (bare.status_code, bare.headers["location"]) == (302, "/qorven/chat/")
    assert (root.status_code, root.headers["location"]) == (302, "/qorven/chat/")
    assert stripped.headers["location"] == chat.headers["location"] == "/qorven/accounts/login/?next=/qorven/chat/"
    assert probe.status_code == 200


def test_with_no_prefix_a_root_path_the_client_chose_moves_no_address(world):
    """Daphne takes a request's root path from its Daphne-Root-Path header, which any client
    may send: pages and redirects must not name places under it (a cache in front would
    hand them to everyone). With no prefix the root path is none, whatever the server says."""
    redirect, login = asgi(("GET", "/", b"", {}), ("GET", "/accounts/login/", b"", {}), root_path="/elsewhere")
    assert redirect.headers["location"] == "/chat/"
    assert "/elsewhere" not in login.text and 'action="/accounts/login/"' in login.text


def test_bind_prints_the_webhook_and_embed_addresses_under_the_prefix(world, url_prefix):
    out = io.StringIO()
    call_command("bind", "telegram", "--tenant", "acme", "--qor", "aria", "--token", "999:T", "--secret", "s",
                 stdout=out)
    assert "webhook: POST https://qorven.example/qorven/v1/webhooks/telegram" in out.getvalue()
    out = io.StringIO()
    call_command("bind", "webchat", "--tenant", "acme", "--qor", "aria", "--key", "wc_cmd", stdout=out)
    assert '<script src="https://qorven.example/qorven/webchat/wc_cmd.js" async></script>' in out.getvalue()


def test_an_sms_webhook_is_verified_against_its_address_under_the_prefix(world, url_prefix):
    from channels_app.adapters.sms import twilio_signature

    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="sms",
                   credentials={"number": "+15550001111", "account_sid": "AC123", "auth_token": "twilio-token"})
    params = {"To": "+15550001111", "From": "+15550002222", "Body": "hi", "MessageSid": "SM9"}
    signature = twilio_signature("twilio-token", "https://qorven.example/qorven/v1/webhooks/sms", params)
    answer = prefixed().post("/v1/webhooks/sms", data=params, HTTP_X_TWILIO_SIGNATURE=signature)
    assert answer.status_code == 200, answer.content


def test_the_terminal_talks_to_a_server_under_the_prefix(world, url_prefix):
    from channels_app.chat import ChatOwner
    from channels_app.terminal_client import ServerLink

    owner = ChatOwner(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, trust="owner", surface="tui")
    link = ServerLink(owner, "https://example.org/qorven/", timeout=SEND_TIMEOUT)
    try:
        assert link.socket_url(session_id=None, last_seq=0) == "wss://example.org/qorven/ws/chat/acme/aria/?surface=tui"
        assert str(link.http.base_url) == "https://example.org/qorven/"
    finally:
        link.close()
