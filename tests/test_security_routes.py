"""Every route, walked as tenant A's owner against tenant B's objects, with bodies and
headers no client should send: each answer is a 4xx (JSON where the route speaks JSON),
nothing is stored and nothing is logged as an error.

Routes come from the URL resolver and the WebSocket router, so a new route is walked
without touching this file; a route whose parameters this file cannot fill fails the
test that lists them. hypothesis generates the bodies and header values."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from channels_app.models import Identity, InboundEvent, OutboundDelivery, PairingRequest
from channels_app.routing import websocket_urlpatterns
from channels_app.services import binding_create
from memory_app.models import Memory
from memory_app.services import memory_add
from sessions_app.models import Message, Session
from tenancy.services import api_token_create

pytestmark = pytest.mark.django_db(transaction=True)

B_WEBCHAT_KEY = "wc_globexpublickey"
SIGNATURE_HEADERS = ("X-Telegram-Bot-Api-Secret-Token", "X-Hub-Signature-256", "X-Slack-Signature",
                     "X-Slack-Request-Timestamp", "X-Signature-Ed25519", "X-Signature-Timestamp",
                     "X-Qorven-Email-Secret", "X-Twilio-Signature", "X-Qorven-Visitor", "Authorization",
                     "Idempotency-Key")
CHANNELS = ("telegram", "whatsapp", "slack", "discord", "email", "sms", "webchat", "nosuch")


def walk(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            if str(pattern.pattern).startswith("admin/"):
                continue  # Django's own admin views; the admin's scoping has its own tests
            yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern)


# How each route parameter is filled: with tenant B's objects (A's owner is no member).
FILL = {
    "<slug:qor_slug>": ["aria"],  # both tenants have a Qor called aria
    "<slug:tenant_slug>": ["globex"],
    "<slug:channel>": list(CHANNELS),
    "<str:key>": [B_WEBCHAT_KEY],
    "<slug:tenant>": ["globex"],
    "<slug:qor>": ["aria"],
    "<int:session_id>": ["1"],
    "<int:seq>": ["1"],
    "<int:index>": ["0"],
    "<int:memory_id>": ["1"],
}


def concrete(route: str) -> list[str]:
    paths = ["/" + route]
    for placeholder, values in FILL.items():
        paths = [p.replace(placeholder, v) for p in paths for v in values] if placeholder in route else paths
    return paths


def every_path() -> list[str]:
    return [path for route in walk(get_resolver().url_patterns) for path in concrete(route)]


def is_json_route(path: str) -> bool:
    return path.startswith(("/v1/", "/chat/api/")) or (path.startswith("/webchat/") and path.endswith("/messages"))


@dataclass
class Stored:
    counts: dict[str, int]

    @classmethod
    def now(cls) -> Stored:
        models = (Message, Session, InboundEvent, OutboundDelivery, Identity, PairingRequest, Memory)
        return cls({m.__name__: m.objects.count() for m in models})


@pytest.fixture
def b_everywhere(world):
    """Tenant B has every channel bound; tenant A's owner is signed in, with a token."""
    credentials = {
        "telegram": {"token": "222:BBB", "secret": "tg-secret-b"},
        "whatsapp": {"phone_number_id": "2055", "token": "t", "app_secret": "wa-b", "verify_token": "v-b"},
        "slack": {"app_id": "A0B", "bot_token": "xoxb-b", "signing_secret": "slack-b"},
        "discord": {"application_id": "9002", "public_key": "00" * 32, "bot_token": "d-b"},
        "email": {"address": "aria@globex.example", "secret": "mail-b"},
        "sms": {"number": "+15550002222", "account_sid": "AC9", "auth_token": "tw-b"},
        "webchat": {"key": B_WEBCHAT_KEY, "secret": "wc-secret-b", "origins": "https://globex.example"},
    }
    for kind, creds in credentials.items():
        binding_create(tenant=world.tenant_b, qor=world.qor_b, kind=kind, credentials=creds)
    for tenant, qor, user in ((world.tenant_a, world.qor_a, world.alice), (world.tenant_b, world.qor_b, world.charlie)):
        memory_add(tenant=tenant, qor=qor, user=user, type=Memory.Type.FACT, content=f"{user.username}'s pin is 1234")
    return world


@pytest.fixture
def as_alice(client, b_everywhere):
    client.force_login(b_everywhere.alice)
    token = api_token_create(tenant=b_everywhere.tenant_a, user=b_everywhere.alice)[1]
    return client, token


def deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


BODIES = st.one_of(
    st.integers(min_value=65, max_value=200_000).map(deep),
    st.integers(min_value=65, max_value=5_000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.just(b'{"content": "a \\ud800 b"}'),
    st.just(b'{"content": "\\udfff", "message": {"text": "\\ud83d"}}'),
    st.binary(min_size=1, max_size=64).filter(lambda b: not _is_utf8_json(b)),
    st.just(b"\xff\xfe{\x00}\x00"),
    st.just(b'{"content": "' + b"x" * (1024 * 1024 + 10) + b'"}'),
)


def _is_utf8_json(raw: bytes) -> bool:
    try:
        json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    return True


HEADER_VALUES = st.one_of(
    # Not blank: a header of only whitespace is an absent one (no webchat visitor token
    # means a new anonymous visitor, which may write).
    st.text(alphabet=st.characters(min_codepoint=0x80, max_codepoint=0xFF), min_size=1, max_size=40)
    .filter(lambda value: value.strip()),
    st.just("Bearer qv_\xe9\xff"),
    st.just("sha256=\xe9"),
)


def assert_refused(response, path: str) -> None:
    assert 400 <= response.status_code < 500, (path, response.status_code, response.content[:300])
    if is_json_route(path):
        assert response["Content-Type"].startswith("application/json"), (path, response["Content-Type"])
        json.loads(response.content)


def test_every_route_is_walked():
    paths = every_path()
    unfilled = [p for p in paths if "<" in p]
    assert not unfilled, f"routes with parameters this module cannot fill: {unfilled}"
    assert "/v1/webhooks/telegram" in paths and "/chat/api/globex/aria/messages" in paths
    assert {str(p.pattern) for p in websocket_urlpatterns} == {"ws/chat/<slug:tenant>/<slug:qor>/",
                                                              "ws/webchat/<str:key>/"}


@given(body=BODIES)
@hypothesis_settings(max_examples=25, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_malformed_bodies_get_a_4xx_and_store_nothing(as_alice, caplog, body):
    client, token = as_alice
    before = Stored.now()
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        for path in every_path():
            response = client.post(path, data=body, content_type="application/json",
                                   HTTP_AUTHORIZATION=f"Bearer {token}" if path.startswith("/v1/qors") else "")
            if not is_json_route(path):  # pages: a redirect, a form or a 4xx, never a 500
                assert response.status_code < 500, (path, response.status_code)
                continue
            assert_refused(response, path)
    assert Stored.now() == before
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]


@given(value=HEADER_VALUES)
@hypothesis_settings(max_examples=40, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_non_ascii_signatures_and_tokens_get_a_4xx_and_store_nothing(as_alice, caplog, value):
    client, _ = as_alice
    before = Stored.now()
    body = json.dumps({"update_id": 1, "content": "hi", "from": "a@b.example", "to": "aria@globex.example",
                       "text": "hi", "message_id": "<m@x>"})
    headers = {"HTTP_" + name.upper().replace("-", "_"): value for name in SIGNATURE_HEADERS}
    with caplog.at_level(logging.ERROR):
        for path in every_path():
            if not is_json_route(path):
                continue
            assert_refused(client.post(path, data=body, content_type="application/json", **headers), path)
        verify = client.get("/v1/webhooks/whatsapp", {"hub.mode": "subscribe", "hub.verify_token": value,
                                                      "hub.challenge": "x"})
        assert 400 <= verify.status_code < 500
    assert Stored.now() == before
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("value", ["10" * 15, str(2**63), "-1", "9" * 400, "1e3", "0x10"])
def test_out_of_range_numbers_in_queries_are_a_4xx(as_alice, value):
    client, token = as_alice
    for param in ("after_seq", "before_seq", "limit"):
        response = client.get("/v1/qors/aria/messages", {param: value}, HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 400 and "error" in response.json()
    for param in ("before_seq", "session"):
        response = client.get("/chat/api/acme/aria/messages", {param: value})
        assert response.status_code in (200, 400)  # an unknown page is empty; a bad number is refused
        assert response.status_code == 400 or response.json()["messages"] == []


def test_a_nul_in_an_address_is_a_400_on_every_route_and_logs_no_error(as_alice, caplog):
    """PostgreSQL refuses NUL in text: a Qor, tenant or webchat key holding %00 failed the
    lookup with a DataError (a 500) on the export, the chat page and the webchat's public
    routes."""
    client, token = as_alice
    client.raise_request_exception = False
    before = Stored.now()
    paths = [*every_path(), "/webchat/wc%00x.js", "/webchat/wc%00x/frame", "/webchat/wc%00x/messages", "/chat/aria/",
             "/admin/sessions_app/message/"]
    with caplog.at_level(logging.ERROR):
        for path in paths:
            for query in ("", "?qor=%00", "?tenant=a%00b", "?q=a%00b&channel=web"):
                if not query and "%00" not in path:
                    continue
                response = client.get(path + query, HTTP_AUTHORIZATION=f"Bearer {token}")
                if path.lstrip("/") in ("healthz", "readyz", "metrics", "favicon.ico", ""):
                    assert response.status_code < 500, (path + query, response.status_code)
                    continue
                assert_refused(response, path + query)
                assert response.status_code == 400, (path + query, response.status_code)
        assert client.post("/webchat/wc%00x/messages", data=json.dumps({"content": "hi"}),
                           content_type="application/json").json() == {
            "error": "the address holds a NUL character (%00), which nothing here takes"}
    assert Stored.now() == before
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]


def test_a_multipart_body_that_cannot_be_read_is_a_json_400_on_the_pages_json_endpoints(as_alice, world):
    client, _ = as_alice
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                   credentials={"key": "wc_acme", "secret": "s", "origins": "https://acme.example"})
    for path in ("/chat/api/acme/aria/messages", "/webchat/wc_acme/messages"):
        for content_type in ("multipart/form-data", "multipart/form-data; boundary="):
            response = client.generic("POST", path, b"garbage", content_type=content_type)
            assert response.status_code == 400, (path, response.status_code)
            assert_refused(response, path)
    assert not Message.objects.exists()


def test_other_tenants_chat_and_webchat_are_not_found(as_alice):
    client, token = as_alice
    assert client.get("/chat/api/globex/aria/messages").status_code == 404
    assert client.post("/chat/api/globex/aria/messages", data=json.dumps({"content": "hi"}),
                       content_type="application/json").status_code == 404
    assert not Message.objects.exists()


def test_a_path_out_of_the_static_folders_is_a_404():
    from channels.testing import HttpCommunicator

    from qorven.asgi import application

    async def get(path: str) -> dict:
        return await HttpCommunicator(application, "GET", path, headers=[(b"host", b"127.0.0.1")]).get_response()

    for path in ("/static/%2e%2e/%2e%2e/manage.py", "/static/..%2f..%2fmanage.py", "/static/qorven/../../../x"):
        response = async_to_sync(get)(path)
        assert response["status"] == 404, (path, response["status"])
        assert b"DJANGO_SECRET_KEY" not in response["body"] and b"import" not in response["body"]


def websocket(path: str, user, headers: list | None = None):
    from qorven.asgi import application

    communicator = WebsocketCommunicator(application, path, headers=[(b"origin", b"http://127.0.0.1"),
                                                                      (b"host", b"127.0.0.1"), *(headers or [])])
    communicator.scope["user"] = user
    return communicator


def test_websockets_refuse_other_tenants_and_answer_bad_frames_with_an_error_event(as_alice, world):
    from django.contrib.auth.models import AnonymousUser

    async def scenario():
        other = websocket("/ws/chat/globex/aria/", AnonymousUser())
        connected, _ = await other.connect()
        assert not connected
        await other.disconnect()

        mine = websocket("/ws/chat/acme/aria/", AnonymousUser(),
                         headers=[(b"authorization", f"Bearer {as_alice[1]}".encode())])
        connected, _ = await mine.connect()
        assert connected
        await mine.receive_json_from(timeout=5)  # the session frame
        for frame in ("not json", "[" * 100_000 + "]" * 100_000, '{"type": "ping", "x": "\\ud800"}'):
            await mine.send_to(text_data=frame)
            answer = await mine.receive_json_from(timeout=5)
            assert answer["type"] == "error"
        await mine.send_to(bytes_data=b"\x00\xff")
        assert (await mine.receive_json_from(timeout=5))["type"] == "error"
        await mine.send_json_to({"type": "ping"})
        assert (await mine.receive_json_from(timeout=5)) == {"type": "pong"}  # still open and working
        await mine.disconnect()

    async_to_sync(scenario)()
    assert connection.vendor  # the database is still usable after the sockets
