from __future__ import annotations

import json
import re

import pytest

from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.services import api_token_create

from ..factories.tenancy import QorFactory

URL = "/v1/qors/{}/messages"


@pytest.fixture
def tokens(world):
    return {
        "alice": api_token_create(tenant=world.tenant_a, user=world.alice)[1],
        "bob": api_token_create(tenant=world.tenant_a, user=world.bob)[1],
        "charlie": api_token_create(tenant=world.tenant_b, user=world.charlie)[1],
    }


def auth(token):
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def post(client, token, content, qor="aria", **headers):
    return client.post(
        URL.format(qor), data=json.dumps({"content": content}), content_type="application/json",
        **auth(token), **headers,
    )


def test_posting_appends_a_web_user_message_to_the_callers_timeline(client, world, tokens):
    response = post(client, tokens["alice"], "What's next on my calendar?")
    assert response.status_code == 201
    body = response.json()
    assert body["created"] is True
    assert body["message"]["seq"] == 1
    assert body["message"]["channel"] == "web"
    assert body["message"]["role"] == "user"
    assert body["message"]["sender_name"] == "Alice"
    stored = Message.objects.get()
    assert (stored.content, stored.channel, stored.session.user) == ("What's next on my calendar?", "web", world.alice)

    timeline = client.get(URL.format("aria"), **auth(tokens["alice"])).json()
    assert timeline["session"]["kind"] == "canonical"
    assert [m["content"] for m in timeline["messages"]] == ["What's next on my calendar?"]
    assert set(timeline["messages"][0]) == {
        "seq", "role", "content", "channel", "sender_name", "created_at", "answer_state"
    }
    assert timeline["messages"][0]["answer_state"] == "pending"  # no model answers in this test


@pytest.mark.parametrize("channel, status", [("tui", 201), ("telegram", 400), ("webchat", 400), (7, 400)])
def test_a_client_may_post_as_the_terminal_and_no_other_channel(client, world, tokens, channel, status):
    response = client.post(URL.format("aria"), data=json.dumps({"content": "hi", "channel": channel}),
                           content_type="application/json", **auth(tokens["alice"]))
    assert response.status_code == status
    if status == 201:
        assert Message.objects.get().channel == "tui" and response.json()["message"]["channel"] == "tui"
    else:
        assert '"channel" must be one of: tui, web' in response.json()["error"] and not Message.objects.exists()


def test_timeline_merges_channels_and_filters_by_channel(client, world, tokens):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    message_append(session=session, role="user", content="from telegram", channel="telegram", sender_name="Alice")
    post(client, tokens["alice"], "from the web")
    everything = client.get(URL.format("aria"), **auth(tokens["alice"])).json()["messages"]
    assert [(m["seq"], m["channel"]) for m in everything] == [(1, "telegram"), (2, "web")]
    only_telegram = client.get(URL.format("aria") + "?channel=telegram", **auth(tokens["alice"])).json()["messages"]
    assert [m["content"] for m in only_telegram] == ["from telegram"]
    after = client.get(URL.format("aria") + "?after_seq=1", **auth(tokens["alice"])).json()["messages"]
    assert [m["seq"] for m in after] == [2]
    newest = client.get(URL.format("aria") + "?limit=1", **auth(tokens["alice"])).json()["messages"]
    assert [m["seq"] for m in newest] == [2]


def test_timeline_before_the_first_message_is_empty(client, world, tokens):
    body = client.get(URL.format("aria"), **auth(tokens["bob"])).json()
    assert body == {"session": None, "messages": []}


def test_idempotency_key_stores_one_message_and_returns_it_again(client, world, tokens):
    first = post(client, tokens["alice"], "pay the rent", HTTP_IDEMPOTENCY_KEY="k-123")
    second = post(client, tokens["alice"], "pay the rent", HTTP_IDEMPOTENCY_KEY="k-123")
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json()["created"] is False
    assert second.json()["message"] == first.json()["message"]
    assert Message.objects.count() == 1
    # The same key from another user is that user's own message.
    assert post(client, tokens["bob"], "pay the rent", HTTP_IDEMPOTENCY_KEY="k-123").status_code == 201
    assert Message.objects.count() == 2


def test_users_of_one_tenant_do_not_see_each_others_chats(client, world, tokens):
    post(client, tokens["alice"], "alice's note")
    assert client.get(URL.format("aria"), **auth(tokens["bob"])).json()["messages"] == []


@pytest.mark.parametrize("method", ["get", "post"])
def test_every_cross_tenant_attempt_is_404(client, world, tokens, method):
    # Charlie's tenant has a Qor with the same slug; alice's token must never reach it,
    # and a Qor that exists only in tenant A is a 404 for charlie.
    world.qor_b.slug = "globex-only"
    world.qor_b.save(update_fields=["slug"])
    post(client, tokens["charlie"], "charlie's secret", qor="globex-only")
    for token, qor in ((tokens["alice"], "globex-only"), (tokens["charlie"], "aria")):
        if method == "get":
            response = client.get(URL.format(qor), **auth(token))
        else:
            response = post(client, token, "intrusion", qor=qor)
        assert response.status_code == 404
        assert "error" in response.json()
    assert not Message.objects.filter(content="intrusion").exists()
    assert Message.objects.get(content="charlie's secret").tenant == world.tenant_b


def test_a_token_stops_working_when_its_user_leaves_the_tenant(client, world, tokens):
    world.bob.memberships.all().delete()
    assert client.get(URL.format("aria"), **auth(tokens["bob"])).status_code == 401


@pytest.mark.parametrize(
    "headers",
    [{}, {"HTTP_AUTHORIZATION": "Bearer nope"}, {"HTTP_AUTHORIZATION": "Basic YWxpY2U6cHc="}],
)
def test_missing_or_bad_tokens_are_401(client, world, headers):
    response = client.get(URL.format("aria"), **headers)
    assert response.status_code == 401
    assert response.json()["error"]


@pytest.mark.parametrize(
    "body, content_type",
    [
        ("not json", "application/json"),
        ("[1, 2]", "application/json"),
        ("{}", "application/json"),
        ('{"content": ""}', "application/json"),
        ('{"content": 5}', "application/json"),
        ("content=hi", "application/x-www-form-urlencoded"),
    ],
)
def test_bad_post_bodies_are_400_with_a_message_and_store_nothing(client, world, tokens, body, content_type):
    response = client.post(URL.format("aria"), data=body, content_type=content_type, **auth(tokens["alice"]))
    assert response.status_code == 400
    assert response.json()["error"]
    assert Message.objects.count() == 0


@pytest.mark.parametrize(
    "query", ["after_seq=x", "after_seq=-1", "limit=0", "limit=100000", "channel=pigeon", "after_seq=1&before_seq=5"]
)
def test_bad_query_parameters_are_400(client, world, tokens, query):
    response = client.get(URL.format("aria") + "?" + query, **auth(tokens["alice"]))
    assert response.status_code == 400
    assert response.json()["error"]


def test_without_a_limit_the_page_is_50_or_qorven_api_page_max_when_that_is_less(client, world, tokens, settings):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    for n in range(14):
        message_append(session=session, role="user", content=f"m{n}", channel="web")
    settings.QORVEN_API_PAGE_MAX = 5
    page = client.get(URL.format("aria"), **auth(tokens["alice"])).json()["messages"]
    assert [m["content"] for m in page] == ["m9", "m10", "m11", "m12", "m13"]  # the newest five
    settings.QORVEN_API_PAGE_MAX = 500
    assert len(client.get(URL.format("aria"), **auth(tokens["alice"])).json()["messages"]) == 14


@pytest.mark.parametrize("name", ["limit", "after_seq", "before_seq"])
def test_an_integer_too_large_is_said_to_be_out_of_range_not_to_be_no_integer(client, world, tokens, name):
    response = client.get(URL.format("aria") + f"?{name}=99999999999999999999999", **auth(tokens["alice"]))
    assert response.status_code == 400
    assert response.json()["error"].startswith(f"{name} must be between ")
    padded = client.get(URL.format("aria") + f"?{name}=0000000000000000000001", **auth(tokens["alice"]))
    assert padded.status_code == 200  # leading zeros are still the number one
    assert client.get(URL.format("aria") + f"?{name}=12x", **auth(tokens["alice"])).json() == {
        "error": f"{name} must be an integer"}


def test_the_api_takes_json_only_files_go_through_the_chat_page(client, world, tokens):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from .test_uploads import picture

    form = {"content": "see this", "image": SimpleUploadedFile("a.png", picture(), content_type="image/png")}
    refused = client.post(URL.format("aria"), data=form, **auth(tokens["alice"]))
    assert refused.status_code == 400 and refused.json() == {"error": "send JSON with Content-Type: application/json"}
    assert not Message.objects.exists()
    client.force_login(world.alice)
    form["image"].seek(0)
    taken = client.post("/chat/api/acme/aria/messages", data=form)
    assert taken.status_code == 201, taken.content[:300]
    assert Message.objects.get().content == "see this"


def test_other_methods_are_refused(client, world, tokens):
    assert client.delete(URL.format("aria"), **auth(tokens["alice"])).status_code == 405


def _a_turn_with_a_tool_call(world):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="user", content="what time is it?", channel="web")
    message_append(session=session, role="assistant", content="", channel="web",
                   tool_calls=[{"id": "c1", "type": "function", "function": {"name": "current_time", "arguments": "{}"}}])
    message_append(session=session, role="tool", content='{"now": "12:00"}', channel="web", tool_call_id="c1")
    message_append(session=session, role="assistant", content="It is noon.", channel="web")
    return session


def test_the_timeline_hides_the_qors_working_unless_asked_for_it(client, world, tokens):
    _a_turn_with_a_tool_call(world)
    shown = client.get(URL.format("aria"), **auth(tokens["alice"])).json()["messages"]
    assert [(m["seq"], m["role"], m["content"]) for m in shown] == [(1, "user", "what time is it?"),
                                                                      (4, "assistant", "It is noon.")]
    assert [m["seq"] for m in client.get(URL.format("aria"), {"limit": 1}, **auth(tokens["alice"])).json()["messages"]
            ] == [4]  # the limit counts what is shown
    everything = client.get(URL.format("aria"), {"include": "tools"}, **auth(tokens["alice"])).json()["messages"]
    assert [m["role"] for m in everything] == ["user", "assistant", "tool", "assistant"]
    assert client.get(URL.format("aria"), {"include": "secrets"}, **auth(tokens["alice"])).status_code == 400


def test_get_history_gives_the_model_the_conversation_not_the_working(world):
    from sessions_app.tools import get_history
    from tenancy.tool_registry import ToolContext

    session = _a_turn_with_a_tool_call(world)
    ctx = ToolContext(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, session_id=session.pk, channel="web",
                      trust="owner")
    got = get_history(ctx, {"channel": "web", "limit": 2})
    assert [(m["seq"], m["content"]) for m in got["messages"]] == [(1, "what time is it?"), (4, "It is noon.")]


@pytest.mark.parametrize("channel", ["web", "tui"])
def test_the_web_and_the_terminal_can_be_switched_off_like_any_channel(client, world, tokens, channel):
    from tenancy.models import PluginSetting

    PluginSetting.objects.create(tenant=world.tenant_a, kind="channel", name=channel, enabled=False)
    response = client.post(URL.format("aria"), data=json.dumps({"content": "hi", "channel": channel}),
                           content_type="application/json", **auth(tokens["alice"]))
    assert response.status_code == 403 and "switched off" in response.json()["error"]
    client.force_login(world.alice)
    page = client.post("/chat/api/acme/aria/messages", data=json.dumps({"content": "hi"}),
                       content_type="application/json")
    assert page.status_code == (403 if channel == "web" else 201)
    assert Message.objects.filter(channel=channel).count() == 0


def test_a_tokens_last_use_is_written_once_a_minute_not_on_every_request(client, world, tokens):
    from datetime import timedelta

    from tenancy.models import ApiToken

    assert post(client, tokens["alice"], "one").status_code == 201
    token = ApiToken.objects.get(user=world.alice)
    first = token.last_used_at
    assert first is not None
    assert post(client, tokens["alice"], "two").status_code == 201
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first  # a second later: not written again
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - timedelta(minutes=2))
    assert post(client, tokens["alice"], "three").status_code == 201
    assert ApiToken.objects.get(pk=token.pk).last_used_at > first


@pytest.mark.django_db(transaction=True)  # the request's own transaction, as served
def test_a_post_is_three_reads_and_one_write_of_the_message_not_the_token(client, world, tokens, django_assert_max_num_queries):
    assert post(client, tokens["alice"], "warm up").status_code == 201
    # Three reads — the token with its membership, the Qor with the caller's chat
    # (sessions_app.qor_chat: were two), the switches — and the append: one statement, a
    # transaction of its own (no BEGIN or COMMIT around it), with no savepoint: a message
    # without a platform id has no duplicate to catch.
    with django_assert_max_num_queries(4) as captured:
        assert post(client, tokens["alice"], "hello").status_code == 201
    assert not [q["sql"] for q in captured.captured_queries
                if q["sql"].upper().startswith(("SAVEPOINT", "BEGIN", "COMMIT"))]
    assert Message.objects.filter(session__user=world.alice, content="hello").count() == 1
    written = {table for q in captured.captured_queries
               for table in re.findall(r'\b(?:INSERT INTO|UPDATE)\s+"?(\w+)', q["sql"], flags=re.IGNORECASE)}
    assert "sessions_app_message" in written and "qorven_apitoken" not in written


@pytest.mark.django_db(transaction=True)
def test_a_timeline_read_is_the_token_the_qor_with_the_chat_and_its_messages(client, world, tokens,
                                                                             django_assert_max_num_queries):
    assert post(client, tokens["alice"], "warm up").status_code == 201
    # The token with its membership, the Qor with the caller's chat (sessions_app.qor_chat:
    # were two, as the POST's were), the page of messages.
    with django_assert_max_num_queries(3) as captured:
        timeline = client.get(URL.format("aria"), **auth(tokens["alice"]))
    assert timeline.status_code == 200
    assert [m["content"] for m in timeline.json()["messages"]] == ["warm up"]
    assert sum("sessions_app_session" in q["sql"] for q in captured.captured_queries) == 1


def test_a_timeline_read_before_the_first_message_or_after_clear_is_the_empty_successor(client, world, tokens):
    from sessions_app.services.lifecycle import session_rotate

    empty = client.get(URL.format("aria"), **auth(tokens["alice"])).json()
    assert (empty["session"], empty["messages"]) == (None, [])
    first = post(client, tokens["alice"], "before /clear").json()["session"]["id"]
    session_rotate(session=Session.objects.get(pk=first))
    cleared = client.get(URL.format("aria"), **auth(tokens["alice"])).json()
    successor = Session.objects.get(user=world.alice, kind="canonical", state="active")
    assert cleared["session"]["id"] == successor.pk != first and cleared["messages"] == []
    # A Qor of another tenant is the same 404 as a missing one, before any 400.
    QorFactory(tenant=world.tenant_b, slug="orion", is_default=False)
    for slug in ("nope", "orion"):
        missing = client.get(URL.format(slug) + "?limit=0", **auth(tokens["alice"]))
        assert missing.status_code == 404


@pytest.mark.django_db(transaction=True)
def test_in_legacy_mode_the_timeline_reads_the_session_the_client_writes_to(client, world, tokens, settings,
                                                                            model_server, drain):
    from ..fakes.model_server import reply

    settings.QORVEN_LEGACY_SESSIONS = True
    model_server.add(reply("Tuesday at 10."))
    response = client.post(URL.format("aria"), data=json.dumps({"content": "When is standup?", "channel": "tui"}),
                           content_type="application/json", **auth(tokens["alice"]))
    assert response.status_code == 201
    drain()
    written = response.json()["session"]["id"]
    as_terminal = client.get(URL.format("aria") + "?surface=tui", **auth(tokens["alice"])).json()
    assert as_terminal["session"]["id"] == written
    assert [m["content"] for m in as_terminal["messages"]] == ["When is standup?", "Tuesday at 10."]
    # A terminal filtering its own channel reads its own session too.
    filtered = client.get(URL.format("aria") + "?channel=tui", **auth(tokens["alice"])).json()
    assert filtered["session"]["id"] == written and len(filtered["messages"]) == 2
    web = client.get(URL.format("aria"), **auth(tokens["alice"])).json()  # the web surface has its own, still empty
    assert (web["session"], web["messages"]) == (None, [])
    assert client.get(URL.format("aria") + "?surface=telegram", **auth(tokens["alice"])).status_code == 400


def test_a_post_after_the_chat_was_cleared_goes_to_its_successor_not_the_archive(client, world, tokens):
    from sessions_app.services.lifecycle import session_rotate

    first = post(client, tokens["alice"], "before /clear").json()["session"]["id"]
    session_rotate(session=Session.objects.get(pk=first))
    response = post(client, tokens["alice"], "after /clear")
    assert response.status_code == 201
    now = response.json()["session"]
    assert now["id"] != first and (now["kind"], now["state"]) == ("canonical", "active")
    assert [m.content for m in Message.objects.filter(session_id=first)] == ["before /clear"]
    assert [m.content for m in Message.objects.filter(session_id=now["id"])] == ["after /clear"]


def test_in_legacy_mode_a_post_goes_to_its_surface_s_session_not_the_canonical_chat(client, world, tokens, settings):
    canonical = post(client, tokens["alice"], "in the canonical chat").json()["session"]["id"]
    settings.QORVEN_LEGACY_SESSIONS = True
    response = post(client, tokens["alice"], "in the web's own session")
    assert response.status_code == 201
    legacy = Session.objects.get(pk=response.json()["session"]["id"])
    assert legacy.pk != canonical and legacy.kind == "legacy" and legacy.channel == "web"
    assert [m.content for m in Message.objects.filter(session_id=canonical)] == ["in the canonical chat"]


def test_a_switched_off_web_channel_refuses_a_post_to_a_chat_that_exists(client, world, tokens):
    from tenancy.models import PluginSetting

    assert post(client, tokens["alice"], "while on").status_code == 201
    PluginSetting.objects.create(tenant=world.tenant_a, kind="channel", name="web", enabled=False)
    response = post(client, tokens["alice"], "while off")
    assert response.status_code == 403 and "switched off" in response.json()["error"]
    assert post(client, tokens["alice"], "while off", qor="nope").status_code == 404  # 404 before 403, as ever
    assert not Message.objects.filter(content="while off").exists()


def test_a_token_past_its_expiry_is_refused_like_a_revoked_one(client, world):
    from datetime import timedelta

    from django.utils import timezone

    from tenancy.models import ApiToken

    token, raw = api_token_create(tenant=world.tenant_a, user=world.alice,
                                  expires_at=timezone.now() + timedelta(hours=1))
    assert client.get(URL.format("aria"), **auth(raw)).status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert client.get(URL.format("aria"), **auth(raw)).status_code == 401


def _revoked(world, token):
    from tenancy.services import api_tokens_revoke

    api_tokens_revoke(tokens=type(token).objects.filter(pk=token.pk))


def _expired(world, token):
    from datetime import timedelta

    from django.utils import timezone

    type(token).objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))


def _deactivated(world, token):
    world.bob.is_active = False
    world.bob.save(update_fields=["is_active"])


def _removed(world, token):
    world.bob.memberships.all().delete()  # not memberships_remove: the token is left live


def _suspended(world, token):
    from tenancy.services import tenant_suspend

    tenant_suspend(tenant=world.tenant_a)


# Every /v1/ endpoint a token opens, with a request that would change or read something.
TOKEN_ENDPOINTS = [
    ("get", "/v1/qors/aria/messages", None), ("post", "/v1/qors/aria/messages", {"content": "still here?"}),
    ("post", "/v1/qors/aria/stop", {"reply_to": 1}),
    ("post", "/v1/qors/aria/voice-transcripts", {"call_id": "c", "turns": [{"text": "still here?"}]}),
    ("get", "/v1/qors/aria/memories", None), ("delete", "/v1/qors/aria/memories/1", None),
    ("get", "/v1/timezone", None), ("put", "/v1/timezone", {"timezone": "Europe/Paris"}), ("get", "/v1/export", None),
]


@pytest.mark.parametrize("end", [_revoked, _expired, _deactivated, _removed, _suspended])
def test_a_token_whose_access_ended_gets_on_every_endpoint_what_a_made_up_one_gets(client, world, end):
    # Revoked, run out, its account deactivated, its person removed, its workspace suspended:
    # refused everywhere, each the same 401 as a token that never was (nothing tells a
    # guesser that one once worked), and nothing is written.
    from tenancy.models import Membership

    token, raw = api_token_create(tenant=world.tenant_a, user=world.bob)
    end(world, token)
    made_up = "qv_" + "x" * 43
    for method, url, body in TOKEN_ENDPOINTS:
        answers = [getattr(client, method)(url, data=json.dumps(body) if body else None,
                                           content_type="application/json", **auth(t)) for t in (raw, made_up)]
        assert [(a.status_code, a.json(), a["WWW-Authenticate"]) for a in answers] == [
            (401, {"error": "invalid or revoked token"}, 'Bearer realm="qorven"')] * 2, (method, url)
    assert not Message.objects.exists() and not Session.objects.exists()
    assert not Membership.objects.filter(user=world.bob).exclude(timezone="").exists()


def test_a_method_an_endpoint_does_not_take_is_a_json_405_naming_the_ones_it_does(client, world, tokens):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {tokens['alice']}"}
    for method, url, allowed in (("put", "/v1/qors/aria/messages", "GET, POST"),
                                 ("delete", "/v1/qors/aria/messages", "GET, POST"),
                                 ("get", "/v1/qors/aria/voice-transcripts", "POST")):
        response = getattr(client, method)(url, **auth)
        assert (response.status_code, response["Allow"]) == (405, allowed)
        assert response.json()["error"].startswith("use ")


def test_the_pages_json_calls_refused_for_their_csrf_token_answer_json(world):
    from django.test import Client

    page = Client(enforce_csrf_checks=True)
    page.force_login(world.alice)
    response = page.post("/chat/api/acme/aria/messages", data='{"content": "hi"}', content_type="application/json")
    assert response.status_code == 403 and "reload the page" in response.json()["error"]
    signed_in = Client()
    signed_in.force_login(world.alice)
    assert signed_in.put("/chat/api/acme/aria/messages").json() == {"error": "use GET or POST"}
    form = page.post("/accounts/logout/")  # a form's refusal stays Django's page
    assert form.status_code == 403 and form["Content-Type"].startswith("text/html")


@pytest.mark.django_db(transaction=True)
def test_a_message_posted_while_the_broker_is_down_is_stored_and_the_answer_is_201(client, world, tokens, settings):
    """Stored first, then its turn queued: a broker that refuses leaves the message waiting
    for the sweeper, and the client is told it was taken — a 500 would make it send again,
    and store a second copy."""
    import socket

    from ..conftest import broker_use

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: connections are refused
    broker_use(settings, f"redis://127.0.0.1:{port}/0")
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": "while the broker is down"}),
                           content_type="application/json", **auth(tokens["alice"]))
    assert response.status_code == 201, response.content[:300]
    assert Message.objects.get(content="while the broker is down").answer_state == "pending"


def test_every_error_under_v1_is_json_and_a_pages_stays_html(client, world, tokens, monkeypatch):
    """The API's errors are {"error": "…"}: a method a webhook does not take was an empty
    405, a path that names nothing Django's HTML 404."""
    def refused(response, status):
        assert response.status_code == status, response.content[:300]
        assert response["Content-Type"] == "application/json" and response.json()["error"], response.content[:300]
        return response

    assert refused(client.get("/v1/webhooks/telegram"), 405)["Allow"] == "POST"
    assert refused(client.put("/v1/webhooks/whatsapp"), 405)["Allow"] == "GET, POST"
    refused(client.get("/v1/webhooks/whatsapp", {"hub.mode": "subscribe", "hub.verify_token": "nope"}), 403)
    refused(client.get("/v1/webhooks/whatsapp"), 400)
    for path in ("/v1/nothing", "/v1/qors/aria/", "/v1/qors/aria/messages/", "/v1/"):
        refused(client.get(path, **auth(tokens["alice"])), 404)
    refused(client.get(URL.format("aria"), HTTP_HOST="elsewhere.example", **auth(tokens["alice"])), 400)

    from django.test import Client

    import channels_app.api

    def broken(**kwargs):
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(channels_app.api, "qor_chat_get", broken)  # the timeline reads the Qor with the chat
    failed = Client(raise_request_exception=False).get(URL.format("aria"), **auth(tokens["alice"]))
    assert refused(failed, 500).json() == {"error": "something went wrong on our side; try again later"}

    page = client.get("/nothing-here")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")


def test_stop_asks_the_turn_writing_the_reply_to_stop_and_says_when_none_is(client, world, tokens):
    from qorven.agent.stop import StopWatch, TurnStopped

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="tui", user=world.alice)
    asked = message_append(session=session, role="user", content="a long story", channel="tui").message
    Message.objects.filter(pk=asked.pk).update(answer_state=Message.Answer.PENDING)
    stop = "/v1/qors/{}/stop"

    def post_stop(token, body, qor="aria"):
        return client.post(stop.format(qor), data=json.dumps(body), content_type="application/json", **auth(token))

    response = post_stop(tokens["alice"], {"reply_to": asked.seq, "surface": "tui"})
    assert response.status_code == 202 and response.json() == {"stopping": asked.seq}
    with pytest.raises(TurnStopped):  # the turn answering it notices, and takes the request
        StopWatch(session_id=session.pk, reply_to=asked.seq).check()
    StopWatch(session_id=session.pk, reply_to=asked.seq).check()
    # Not Bob's chat, nor Charlie's (his token names his own tenant's aria): nothing asked of Alice's turn.
    for other in ("bob", "charlie"):
        assert post_stop(tokens[other], {"reply_to": asked.seq}).status_code == 409
        StopWatch(session_id=session.pk, reply_to=asked.seq).check()
    assert post_stop(tokens["alice"], {"reply_to": asked.seq}, qor="nope").status_code == 404
    Message.objects.filter(pk=asked.pk).update(answer_state=Message.Answer.ANSWERED)
    assert post_stop(tokens["alice"], {"reply_to": asked.seq}).status_code == 409
    for body in ({}, {"reply_to": "1"}, {"reply_to": True}, {"reply_to": 1, "surface": "telegram"}):
        assert post_stop(tokens["alice"], body).status_code == 400, body


@pytest.mark.parametrize("surface", [[], ["tui"], {}, {"web": 1}, None, 7])
def test_a_stop_whose_surface_is_no_name_is_a_400_saying_so(client, world, tokens, surface):
    client.raise_request_exception = False
    response = client.post("/v1/qors/aria/stop", data=json.dumps({"reply_to": 1, "surface": surface}),
                           content_type="application/json", **auth(tokens["alice"]))
    assert response.status_code == 400
    assert response.json() == {"error": '"surface" must be one of: tui, web'}
