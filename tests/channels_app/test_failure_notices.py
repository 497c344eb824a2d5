"""What a person reads when the model fails is one of our notices, on every surface: never
the provider's words (a key fragment, a URL), which only the log and the admin keep."""
from __future__ import annotations

import json

import pytest

from channels_app.chat import chat_events
from channels_app.services import binding_create
from sessions_app.models import Message, Session
from tenancy.services import api_token_create

from ..fakes.model_server import error
from .conftest import pair
from .payloads import post_telegram, telegram_update
from .test_webchat import send as webchat_send

pytestmark = pytest.mark.django_db(transaction=True)

LEAK = ("Incorrect API key provided: sk-proj-Ab12**wxyz. You can find your API key at "
        "https://platform.openai.com/account/api-keys.")
FRAGMENTS = ("sk-proj", "Ab12", "wxyz", "platform.openai.com", "Incorrect API key")


def assert_clean(text: str) -> None:
    for fragment in FRAGMENTS:
        assert fragment not in text, f"{fragment!r} reached a surface: {text}"


def test_a_401_with_a_key_in_its_body_reaches_no_surface_and_the_admin_shows_it(
    client, world, telegram, platform, model_server, drain, settings
):
    settings.QORVEN_MODEL_RETRIES = 0
    model_server.default = error(401, LEAK, code="invalid_api_key")
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    # The owner on the web (API), then on Telegram, then an anonymous webchat visitor.
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": "hi"}),
                           content_type="application/json", **auth)
    assert response.status_code == 201
    pair(world, "telegram", "42", world.alice)
    assert post_telegram(client, telegram_update("hi from telegram")).status_code == 200
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                   credentials={"key": "wc_testkey", "secret": "site-signing-secret",
                                "origins": "https://acme.example"})
    visitor = webchat_send(client, "hello from the site").json()["visitor"]
    drain()

    # The API and the chat page's events (what the web page, the terminal and the webchat
    # read) carry our notices only.
    timeline = client.get("/v1/qors/aria/messages", **auth).json()
    assert_clean(json.dumps(timeline))
    notices = [m for m in timeline["messages"] if m["role"] == "system"]
    assert [n["channel"] for n in notices] == ["web", "telegram"]
    web, tg = (n["content"] for n in notices)
    assert "settings need fixing" in web and "(HTTP 401, model scripted-model at 127.0.0.1:" in web  # owner surface
    assert "settings need fixing" in tg and "401" not in tg and "scripted-model" not in tg
    assert all("/retry" not in n["content"] for n in notices)  # retrying cannot fix a bad key
    assert [m["answer_state"] for m in timeline["messages"] if m["role"] == "user"] == ["failed", "failed"]
    canonical = Session.objects.get(tenant=world.tenant_a, user=world.alice, kind="canonical")
    assert_clean(json.dumps(chat_events(session=canonical)))

    webchat_page = client.get("/webchat/wc_testkey/messages", HTTP_X_QORVEN_VISITOR=visitor).json()
    assert_clean(json.dumps(webchat_page))
    (visitor_notice,) = [m for m in webchat_page["messages"] if m["role"] == "system"]
    assert "401" not in visitor_notice["content"] and "model" in visitor_notice["content"]

    # What reached Telegram.
    sent = [s.json["text"] for s in platform.sent(r"/telegram/bot111:AAA/sendMessage")]
    assert len(sent) == 1 and "settings need fixing" in sent[0]
    assert_clean(" ".join(sent))

    # The admin (and the message row) keep the provider's words for whoever fixes it.
    failed = Message.objects.filter(answer_state="failed").order_by("pk")
    assert failed.count() == 3 and all("Incorrect API key provided" in m.answer_error for m in failed)
    from ..factories.tenancy import UserFactory

    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    page = client.get(f"/admin/sessions_app/message/{failed[0].pk}/change/").content.decode()
    assert "Incorrect API key provided" in page
    listing = client.get("/admin/sessions_app/message/?answer_state__exact=failed").content.decode()
    assert listing.count('<td class="field-answer">failed</td>') >= 3
