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


@pytest.mark.parametrize("how", ["json", "form"])
def test_a_client_id_with_a_nul_is_a_400_and_nothing_is_stored(client, world, how):
    # The page's script sends an id of its own making; a NUL in one (no database stores
    # it in text) is a 400 saying so, not a failure of ours.
    client.raise_request_exception = False
    client.force_login(world.alice)
    sent = {"content": "hello", "client_id": "c\u00001"}
    response = (client.post(API, data=json.dumps(sent), content_type="application/json") if how == "json"
                else client.post(API, data=sent))
    assert response.status_code == 400
    assert response.json() == {"error": '"client_id" must not hold a NUL character'}
    assert not Message.objects.exists()


def test_the_api_answers_401_without_a_login(client, world):
    assert client.get(API).status_code == 401


def test_the_browsers_favicon_request_finds_the_icon(client, db):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("qorven/favicon.svg")


def test_earlier_conversations_are_listed_and_readable_by_their_owner_only(client, world):
    from sessions_app.services.append import message_append
    from sessions_app.services.lifecycle import session_rotate
    from sessions_app.services.resolve import session_resolve

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


def talk_with_tools(session, turns, *, channel="web"):
    """`turns` questions each answered after a tool call and three results (never shown):
    the conversation's visible messages, oldest first, as (seq, content)."""
    from sessions_app.services.append import message_append

    shown = []
    for n in range(turns):
        shown.append(message_append(session=session, role="user", content=f"q{n}", channel=channel,
                                    notify=False).message)
        call = {"id": f"c{n}", "type": "function", "function": {"name": "memory_search", "arguments": "{}"}}
        message_append(session=session, role="assistant", content="", channel=channel, tool_calls=[call],
                       notify=False)
        for r in range(3):
            message_append(session=session, role="tool", content=f"result {r}", channel=channel,
                           tool_call_id=f"c{n}", notify=False)
        shown.append(message_append(session=session, role="assistant", content=f"a{n}", channel=channel,
                                    notify=False).message)
    return [(m.seq, m.content) for m in shown]


def read_back(client, url):
    """Every page of `url`'s history, newest page first, as the page reads them: then
    "Show earlier" from each page's oldest message while `more` says so."""
    pages = [client.get(url).json()]
    while pages[-1]["more"]:
        pages.append(client.get(f"{url}&before_seq={pages[-1]['messages'][0]['seq']}").json())
    return pages


@pytest.mark.parametrize("which", ["current", "archived"])
def test_a_page_of_history_holds_a_page_of_messages_the_qors_tool_work_takes_no_place(client, world, which):
    """After turns that used tools, a page of the chat (or of an earlier conversation)
    showed a handful of messages, "Show earlier" sometimes none: the tool calls and their
    results, never shown, took the page's places."""
    from channels_app.chat import PAGE
    from sessions_app.services.lifecycle import session_rotate
    from sessions_app.services.resolve import session_resolve

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    shown = talk_with_tools(session, 30)  # 60 messages shown among 180
    if which == "archived":
        session_rotate(session=session)
    client.force_login(world.alice)

    pages = read_back(client, f"{API}?session={session.pk}")
    assert [len(p["messages"]) for p in pages] == [PAGE, 60 - PAGE]
    assert [p["more"] for p in pages] == [True, False]
    read = [(m["seq"], m["content"]) for p in reversed(pages) for m in p["messages"]]
    assert read == shown  # nothing lost, nothing twice, none of the working

    # The search's read-around: the page after a message found, and the one up to it.
    found = shown[5][0]
    after = client.get(f"{API}?session={session.pk}&after_seq={found}").json()
    assert [(m["seq"], m["content"]) for m in after["messages"]] == shown[6:6 + PAGE] and after["more"] is True
    rest = client.get(f"{API}?session={session.pk}&after_seq={after['messages'][-1]['seq']}").json()
    assert [(m["seq"], m["content"]) for m in rest["messages"]] == shown[6 + PAGE:] and rest["more"] is False
    upto = client.get(f"{API}?session={session.pk}&before_seq={found + 1}").json()
    assert [(m["seq"], m["content"]) for m in upto["messages"]] == shown[:6] and upto["more"] is False


def test_the_page_reads_and_writes_the_active_chat_and_in_legacy_mode_the_web_s_own(client, world, settings):
    """The chat is read with the Qor (channels_app.chat.chat_owner_read): none before the
    first message, which makes it; after /clear its successor, never the archive; a
    missing Qor is a 404 before the body is read; legacy mode keeps the web's own session."""
    from sessions_app.models import Session
    from sessions_app.services.lifecycle import session_rotate

    client.force_login(world.alice)

    def send(text, url=API):
        return client.post(url, data=json.dumps({"content": text}), content_type="application/json")

    assert client.get(API).json() == {"session_id": None, "messages": []}
    assert send("", "/chat/api/acme/nope/messages").status_code == 404
    assert client.get("/chat/api/acme/nope/messages").status_code == 404
    first = send("before /clear").json()["session_id"]
    session_rotate(session=Session.objects.get(pk=first))
    assert client.get(API).json()["messages"] == []
    after = send("after /clear").json()["session_id"]
    assert after != first and Session.objects.get(pk=after).state == "active"
    assert [m["content"] for m in client.get(API).json()["messages"] if m["role"] == "user"] == ["after /clear"]
    assert [m.content for m in Message.objects.filter(session_id=first, role="user")] == ["before /clear"]

    settings.QORVEN_LEGACY_SESSIONS = True
    legacy = send("in the web's own session").json()["session_id"]
    assert Session.objects.get(pk=legacy).kind == "legacy"
    assert [m["content"] for m in client.get(API).json()["messages"] if m["role"] == "user"] == [
        "in the web's own session"]
    assert [m.content for m in Message.objects.filter(session_id=after, role="user")] == ["after /clear"]
