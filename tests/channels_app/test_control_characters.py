"""NUL and other control characters in what people write and what the model answers.

PostgreSQL refuses U+0000 in text and in jsonb, so a message holding one could not be
stored at all: its webhook was answered 503 and redelivered for ever, a page's message was
an error, a model's answer failed its turn. A NUL is shown as nothing on every surface,
so it is dropped where text comes in; the rest of the text arrives as written."""
from __future__ import annotations

import json
import time

import pytest

from channels_app.models import Identity
from channels_app.services import binding_create
from channels_app.webchat import webchat_token_sign
from sessions_app.models import Message
from tenancy.services import api_token_create

from ..fakes.model_server import reply
from .conftest import pair
from .payloads import post_telegram, post_whatsapp, telegram_update, whatsapp_body

pytestmark = pytest.mark.django_db(transaction=True)

ODD = "tab\there, bell\x07, crlf\r\nline, ltr \u200e rtl \u202b مرحبا \u202c, zwj 👩\u200d💻"


def rows() -> list[tuple[str, str, str]]:
    return list(Message.objects.order_by("seq").values_list("role", "content", "sender_name"))


def test_a_telegram_message_holding_a_nul_is_stored_without_it_and_answered(
        client, world, telegram, platform, model_server, drain):
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Got it."))
    response = post_telegram(client, telegram_update("before\x00after " + ODD, first_name="Pri\x00ya"))
    assert response.status_code == 200
    drain()
    assert rows() == [("user", "beforeafter " + ODD, "Priya"), ("assistant", "Got it.", "Aria")]
    assert platform.sent("sendMessage")[0].json["text"] == "Got it."


def test_a_whatsapp_message_holding_a_nul_is_stored_without_it(client, world, whatsapp, platform, model_server, drain):
    pair(world, "whatsapp", "15550100", world.alice)
    model_server.add(reply("Noted."))
    assert post_whatsapp(client, whatsapp_body("a\x00b")).status_code == 200
    drain()
    assert [r[1] for r in rows()] == ["ab", "Noted."]


def test_a_page_message_holding_a_nul_is_stored_without_it(client, world, model_server, drain):
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    model_server.add(reply("Fine."))
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": "x\x00y"}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201, response.content
    drain()
    assert [r[1] for r in rows()] == ["xy", "Fine."]


def test_a_message_of_nothing_but_nuls_is_refused_as_empty_on_every_surface(client, world):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                   credentials={"key": "wc_nul", "secret": "s3cret", "origins": "https://acme.example"})
    visitor = webchat_token_sign(secret="s3cret", user_id="alice", expires=int(time.time()) + 600)
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    client.force_login(world.alice)
    for content in ("\x00", "\x00\x00 ", "\n\x00\n"):
        body = json.dumps({"content": content})
        api = client.post("/v1/qors/aria/messages", data=body, content_type="application/json",
                          HTTP_AUTHORIZATION=f"Bearer {token}")
        page = client.post("/chat/api/acme/aria/messages", data=body, content_type="application/json")
        embed = client.post("/webchat/wc_nul/messages", data=body, content_type="application/json",
                            HTTP_X_QORVEN_VISITOR=visitor)
        assert (api.status_code, api.json()) == (400, {"error": '"content" must be a non-empty string'})
        assert (page.status_code, page.json()) == (400, {"error": "the message is empty"})
        assert (embed.status_code, embed.json()) == (400, {"error": "the message is empty"})
        stranger = client.post("/webchat/wc_nul/messages", data=body, content_type="application/json")
        assert stranger.status_code == 400
        voice = client.post("/v1/qors/aria/voice-transcripts", content_type="application/json",
                            data=json.dumps({"call_id": "c1", "turns": [{"text": content}]}),
                            HTTP_AUTHORIZATION=f"Bearer {token}")
        assert voice.status_code == 400
    assert rows() == []
    assert not Identity.objects.exists()  # no anonymous visitor made for an empty message


def test_a_model_answer_holding_a_nul_is_stored_and_sent_without_it(
        client, world, telegram, platform, model_server, drain):
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("one\x00two " + ODD))
    post_telegram(client, telegram_update("hi"))
    drain()
    assert rows()[1][1] == "onetwo " + ODD
    # Its line ends read as Markdown's: a CR LF is the line break it shows.
    assert platform.sent("sendMessage")[0].json["text"] == "onetwo " + ODD.replace("\r\n", "\n")
