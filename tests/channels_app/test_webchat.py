"""The webchat embed: signed visitors merge into their canonical chat, forged tokens are
refused, unsigned visitors get an anonymous chat of their own."""
from __future__ import annotations

import io
import json
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth import get_user_model
from django.core.management import call_command

from channels_app.models import ChannelBinding
from channels_app.services import binding_create
from channels_app.webchat import webchat_token_sign
from sessions_app.models import Message, Session
from sessions_app.services.resolve import session_resolve
from tenancy.models import Membership

from .live_helpers import communicator, receive_until

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "wc_testkey"
SECRET = "site-signing-secret"
URL = f"/webchat/{KEY}/messages"


@pytest.fixture
def webchat(world):
    return binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                          credentials={"key": KEY, "secret": SECRET, "origins": "https://acme.example"})


def token_for(user_id: str, *, secret: str = SECRET, ttl: int = 600) -> str:
    return webchat_token_sign(secret=secret, user_id=user_id, expires=int(time.time()) + ttl)


def send(client, content, token=""):
    headers = {"HTTP_X_QORVEN_VISITOR": token} if token else {}
    return client.post(URL, data=json.dumps({"content": content}), content_type="application/json", **headers)


def test_a_signed_visitor_lands_in_the_owners_canonical_chat(client, world, webchat, drain):
    response = send(client, "hello from my website", token_for("alice"))
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["visitor"] is None and body["message"]["channel"] == "webchat"
    stored = Message.objects.get(content="hello from my website")
    assert stored.session == session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    assert stored.session.kind == Session.Kind.CANONICAL and stored.metadata["trust"] == "trusted"
    drain()
    history = client.get(URL, HTTP_X_QORVEN_VISITOR=token_for("alice")).json()
    assert [m["channel"] for m in history["messages"]][:1] == ["webchat"]
    assert history["session_id"] == stored.session_id


@pytest.mark.parametrize("case", ["wrong-secret", "expired", "too-far-ahead", "past-any-date", "tampered", "not-a-member",
                                  "other-tenant"])
def test_a_forged_or_unacceptable_token_is_refused_and_stores_nothing(client, world, webchat, case):
    token = {
        "wrong-secret": lambda: token_for("alice", secret="guessed"),
        "expired": lambda: token_for("alice", ttl=-5),
        "too-far-ahead": lambda: token_for("alice", ttl=365 * 86400),
        # Signed, but an expiry no float holds (a site's bug): refused like any too far ahead.
        "past-any-date": lambda: webchat_token_sign(secret=SECRET, user_id="alice", expires=10**400),
        "tampered": lambda: token_for("bob").replace("bob:", "alice:", 1),
        "not-a-member": lambda: token_for("nobody"),
        "other-tenant": lambda: token_for("charlie"),  # a member of globex, not acme
    }[case]()
    response = send(client, "let me in", token)
    assert response.status_code == 403
    assert client.get(URL, HTTP_X_QORVEN_VISITOR=token).status_code == 403
    assert not Message.objects.exists()


def test_an_unsigned_visitor_gets_an_anonymous_chat_of_their_own(client, world, webchat, drain):
    first = send(client, "hi, who are you?")
    assert first.status_code == 201
    visitor = first.json()["visitor"]
    assert visitor.startswith("anon.")
    again = send(client, "me again", visitor)
    assert again.status_code == 201 and again.json()["visitor"].startswith("anon.")  # renewed on use
    other = send(client, "a different browser")
    drain()
    mine = Message.objects.get(content="hi, who are you?").session
    assert Message.objects.get(content="me again").session == mine
    assert Message.objects.get(content="a different browser").session != mine
    assert mine.kind == Session.Kind.CANONICAL and mine.tenant == world.tenant_a
    assert mine.user not in (world.alice, world.bob)
    assert not Membership.objects.filter(user=mine.user).exists()  # no way into anything else
    assert Message.objects.get(content="hi, who are you?").metadata["trust"] == "public"
    assert other.json()["visitor"] != visitor
    # What the visitor wrote (the offline notice answering the first may come between them).
    timeline = client.get(URL, HTTP_X_QORVEN_VISITOR=visitor).json()["messages"]
    assert [m["content"] for m in timeline if m["role"] == "user"] == ["hi, who are you?", "me again"]


def test_new_anonymous_visitors_are_limited_per_client_address(client, world, webchat, settings, drain):
    settings.QORVEN_WEBCHAT_NEW_VISITOR_RATE = "2/d"  # fixed windows: a day never turns over mid-test
    users_before = get_user_model().objects.count()
    assert [send(client, f"visitor {i}").status_code for i in range(2)] == [201, 201]
    refused = send(client, "a third new chat from the same address")
    assert refused.status_code == 429
    assert refused.json()["error"].startswith("Too many new chats") and int(refused["Retry-After"]) > 0
    drain()
    assert not Message.objects.filter(content__startswith="a third").exists()
    assert get_user_model().objects.count() == users_before + 2  # no visitor made for it
    other_address = client.post(URL, data=json.dumps({"content": "from elsewhere"}),
                                content_type="application/json", REMOTE_ADDR="203.0.113.9")
    assert other_address.status_code == 201


def test_a_visitor_sending_too_fast_is_told_to_wait_and_nothing_is_stored(client, world, webchat, settings, drain):
    settings.QORVEN_WEBCHAT_MESSAGE_RATE = "3/d"  # fixed windows: a day never turns over mid-test
    token = token_for("alice")
    assert [send(client, f"quick {i}", token).status_code for i in range(3)] == [201, 201, 201]
    refused = send(client, "one too many", token)
    assert refused.status_code == 429 and refused.json()["error"].startswith("Too many messages at once: try again in ")
    assert refused.json()["error"].endswith(("seconds.", " 1 second."))
    assert send(client, "bob is counted on his own", token_for("bob")).status_code == 201
    drain()
    assert not Message.objects.filter(content="one too many").exists()
    assert Message.objects.filter(content__startswith="quick").count() == 3


def test_a_visitors_client_id_with_a_nul_is_a_400_and_nothing_is_stored(client, world, webchat):
    client.raise_request_exception = False
    response = client.post(URL, data=json.dumps({"content": "hello", "client_id": "c\u00001"}),
                           content_type="application/json", HTTP_X_QORVEN_VISITOR=token_for("alice"))
    assert response.status_code == 400
    assert response.json()["error"] == '"client_id" must not hold a NUL character'
    assert not Message.objects.exists()


def test_an_anonymous_token_works_only_on_its_own_webchat(client, world, webchat):
    visitor = send(client, "hi").json()["visitor"]
    binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="webchat", credentials={"key": "wc_other"})
    response = client.post("/webchat/wc_other/messages", data=json.dumps({"content": "hop"}),
                           content_type="application/json", HTTP_X_QORVEN_VISITOR=visitor)
    assert response.status_code == 403


def test_the_embed_script_and_frame(client, world, webchat):
    script = client.get(f"/webchat/{KEY}.js")
    assert script.status_code == 200 and script["Content-Type"].startswith("text/javascript")
    assert f'"http://testserver/webchat/{KEY}/frame"' in script.content.decode()
    frame = client.get(f"/webchat/{KEY}/frame")
    assert frame.status_code == 200
    assert "; frame-ancestors https://acme.example" in frame["Content-Security-Policy"]
    assert "X-Frame-Options" not in frame
    assert client.get("/webchat/wc_nope.js").status_code == 404
    ChannelBinding.objects.filter(pk=webchat.pk).update(enabled=False)
    assert client.get(f"/webchat/{KEY}/frame").status_code == 404


def test_a_visitor_socket_hears_their_chat_and_a_forged_one_is_refused(client, world, webchat):
    token = token_for("alice")

    async def scenario():
        comm = communicator(f"/ws/webchat/{KEY}/?visitor={token}")
        assert (await comm.connect())[0]
        await receive_until(comm, lambda e: e["type"] == "session")
        await sync_to_async(send)(client, "typed in the bubble", token)
        events = await receive_until(comm, lambda e: e.get("content") == "typed in the bubble")
        assert events[-1]["channel"] == "webchat"
        await comm.disconnect()
        forged = communicator(f"/ws/webchat/{KEY}/?visitor={token_for('alice', secret='nope')}")
        assert not (await forged.connect())[0]
        nobody = communicator(f"/ws/webchat/{KEY}/")
        assert not (await nobody.connect())[0]

    async_to_sync(scenario)()


def test_a_visitor_socket_closes_once_its_token_expires_though_it_never_pings(world, webchat, monkeypatch):
    from channels_app.consumers import sign_in

    monkeypatch.setattr(sign_in, "RECHECK_EVERY", 0.5)
    token = token_for("alice", ttl=2)

    async def scenario():
        comm = communicator(f"/ws/webchat/{KEY}/?visitor={token}")
        assert (await comm.connect())[0]
        await receive_until(comm, lambda e: e["type"] == "session")
        await receive_until(comm, lambda e: e["type"] == "signed_out")
        assert (await comm.receive_output(timeout=5))["type"] == "websocket.close"

    async_to_sync(scenario)()


def test_bind_webchat_prints_the_embed_and_a_generated_secret_once(world):
    out = io.StringIO()
    call_command("bind", "webchat", "--tenant", "acme", "--qor", "aria", stdout=out)
    binding = ChannelBinding.objects.get(kind="webchat")
    text = out.getvalue()
    assert f"/webchat/{binding.lookup_key}.js" in text
    assert binding.credentials["secret"] in text  # generated, so shown this once
    out = io.StringIO()
    call_command("bind", "webchat", "--tenant", "acme", "--qor", "aria", "--key", binding.lookup_key,
                 "--secret", "chosen-secret", stdout=out)
    assert "chosen-secret" not in out.getvalue()
    assert ChannelBinding.objects.get(kind="webchat").credentials["secret"] == "chosen-secret"


def test_bind_webchat_again_updates_the_qors_binding_and_keeps_its_key_and_secret(world):
    call_command("bind", "webchat", "--tenant", "acme", "--qor", "aria", stdout=io.StringIO())
    first = ChannelBinding.objects.get(kind="webchat")
    out = io.StringIO()
    call_command("bind", "webchat", "--tenant", "acme", "--qor", "aria", "--origins", "https://acme.example",
                 stdout=out)

    again = ChannelBinding.objects.get(kind="webchat")  # still one
    assert (again.pk, again.lookup_key) == (first.pk, first.lookup_key)
    assert again.credentials["secret"] == first.credentials["secret"]  # visitors' tokens stay valid
    assert again.credentials["origins"] == "https://acme.example"
    assert first.credentials["secret"] not in out.getvalue()  # shown once: the first time


def test_the_printed_embed_works_pasted_as_is(client, world, settings):
    settings.QORVEN_PUBLIC_URL, settings.QORVEN_PUBLIC_URL_GIVEN = "https://chat.acme.example", True
    out = io.StringIO()
    call_command("bind", "webchat", "--tenant", "acme", "--qor", "aria", stdout=out)
    key = ChannelBinding.objects.get(kind="webchat").lookup_key
    line = next(line for line in out.getvalue().splitlines() if line.startswith("embed"))
    snippet = line.split(": ", 1)[1]

    assert snippet == f'<script src="https://chat.acme.example/webchat/{key}.js" async></script>'
    assert "…" not in out.getvalue() and "QORVEN_PUBLIC_URL, unset" not in out.getvalue()
    assert client.get(f"/webchat/{key}.js").status_code == 200


def test_the_embed_hint_says_when_the_public_address_is_a_guess(world, settings):
    settings.QORVEN_PUBLIC_URL, settings.QORVEN_PUBLIC_URL_GIVEN = "http://127.0.0.1:8000", False
    out = io.StringIO()
    call_command("bind", "webchat", "--tenant", "acme", "--qor", "aria", stdout=out)
    assert "embed (a local example, not an address your visitors reach): " in out.getvalue()
    assert "(QORVEN_PUBLIC_URL is unset, so addresses are made from its default, http://127.0.0.1:8000" in out.getvalue()


def test_an_anonymous_token_expires_unless_used_and_each_use_renews_it(client, world, webchat, settings, drain):
    from django.core import signing

    salt = "qorven.webchat.anonymous-visitor"

    class TwoMinutesAgo(signing.TimestampSigner):
        def timestamp(self):
            return signing.b62_encode(int(time.time()) - 120)

    settings.QORVEN_WEBCHAT_VISITOR_TTL = 60
    visitor = send(client, "first visit").json()["visitor"]
    data = signing.loads(visitor[len("anon."):], salt=salt)
    stale = "anon." + TwoMinutesAgo(salt=salt).sign_object(data)  # the same visitor, last seen 2 minutes ago
    refused = send(client, "back after a while", stale)
    assert refused.status_code == 403 and "expired" in refused.json()["error"]
    assert not Message.objects.filter(content="back after a while").exists()
    renewed = send(client, "still here", visitor).json()["visitor"]
    assert signing.loads(renewed[len("anon."):], salt=salt) == data  # the same visitor, a fresh stamp
    assert send(client, "and again", renewed).status_code == 201
    drain()


def test_a_page_of_the_embeds_history_holds_a_page_of_messages_not_the_qors_tool_work(client, world, webchat):
    """The embed read the same pages as the chat page: after turns that used tools, a page
    showed a handful of messages, the tool calls and their results in their places."""
    from channels_app.chat import PAGE

    from .test_chat_page import read_back, talk_with_tools

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    shown = talk_with_tools(session, 30, channel="webchat")
    client.defaults["HTTP_X_QORVEN_VISITOR"] = token_for("alice")
    pages = read_back(client, f"{URL}?session={session.pk}")
    assert [len(p["messages"]) for p in pages] == [PAGE, 60 - PAGE]
    assert [(m["seq"], m["content"]) for p in reversed(pages) for m in p["messages"]] == shown
