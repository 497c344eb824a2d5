"""Telegram and WhatsApp end to end: real payloads, verified, answered through the fake APIs."""
from __future__ import annotations

import logging

import pytest
from django.db import transaction

from channels_app.adapters.telegram import MAX_PHOTO_BYTES
from channels_app.models import InboundEvent, OutboundDelivery
from channels_app.selectors import bindings_by_verify_token
from channels_app.services import binding_create
from sessions_app.models import Image, Message, Session

from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from ..fakes.telegram_html import visible_text
from ..query_plans import query_plan
from .conftest import pair
from .payloads import post_telegram, post_whatsapp, telegram_update, whatsapp_body
from .test_undelivered_reply import ON_THE_WEB as UNSEEN  # our notice that a reply did not get there

pytestmark = pytest.mark.django_db(transaction=True)


def test_telegram_message_gets_a_reply_sent_to_the_same_chat(client, world, telegram, platform, model_server, drain):
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Hello Priya, your meeting is at 3."))
    response = post_telegram(client, telegram_update("when is my meeting?"))
    assert response.status_code == 200
    drain()
    (sent,) = platform.sent(r"/telegram/bot111:AAA/sendMessage")
    assert sent.json == {"chat_id": "42", "text": "Hello Priya, your meeting is at 3.", "parse_mode": "HTML"}
    rows = list(Message.objects.order_by("seq").values_list("role", "channel", "content"))
    assert rows == [("user", "telegram", "when is my meeting?"),
                    ("assistant", "telegram", "Hello Priya, your meeting is at 3.")]
    assert model_server.requests[0]["messages"][-1]["content"] == "[telegram] Priya: when is my meeting?"
    assert Session.objects.get().user == world.alice


@pytest.mark.parametrize("secret", [None, "wrong-secret"])
def test_telegram_with_a_bad_or_missing_secret_is_rejected_and_stores_nothing(client, world, telegram, platform, secret):
    response = post_telegram(client, telegram_update("hi"), secret=secret)
    assert response.status_code in (401, 403)
    assert not InboundEvent.objects.exists() and not Message.objects.exists()


def test_a_replayed_telegram_update_is_stored_once_and_answered_once(client, world, telegram, platform, model_server, drain):
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("once")
    update = telegram_update("hello", message_id=7)
    assert post_telegram(client, update).status_code == 200
    assert post_telegram(client, update).status_code == 200
    drain()
    assert post_telegram(client, update).status_code == 200
    drain()
    assert Message.objects.filter(role="user").count() == 1
    assert len(platform.sent("sendMessage")) == 1
    assert len(model_server.requests) == 1


def _stored_events(world, telegram, *texts: str) -> list[InboundEvent]:
    """Webhooks a moment apart from sender 42, stored and not processed yet."""
    from channels_app.inbound import InboundMessage

    return [
        InboundEvent.objects.create(
            tenant=world.tenant_a, binding=telegram, external_id=f"42:{n}", sender_id="42",
            payload=InboundMessage(channel="telegram", external_id=f"42:{n}", sender_id="42", sender_name="Priya",
                                   text=text, reply_target="42").model_dump(mode="json"),
        )
        for n, text in enumerate(texts, start=1)
    ]


def _as_read(event: InboundEvent, by_task: bool) -> InboundEvent:
    """The event as its task reads it (with its sender's oldest waiting event), or as stored."""
    from channels_app.receive import inbound_event

    return inbound_event(tenant_id=event.tenant_id, event_id=event.pk) if by_task else event


@pytest.fixture
def two_waiting(world, telegram, platform, model_server) -> list[InboundEvent]:
    """Alice's two Telegram messages, "first" and "second", stored and waiting; the model answers "ok"."""
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("ok")
    return _stored_events(world, telegram, "first", "second")


@pytest.mark.parametrize("by_task", [True, False])
def test_a_senders_messages_reach_the_conversation_in_arrival_order_whichever_task_runs_first(
    two_waiting, drain, by_task
):
    from channels_app.receive import inbound_process

    first, second = two_waiting
    # The second one's task runs first.
    assert inbound_process(event=_as_read(second, by_task)) == "accepted"
    drain()
    users = list(Message.objects.filter(role="user").order_by("seq").values_list("content", flat=True))
    assert users == ["first", "second"]
    assert set(InboundEvent.objects.values_list("state", flat=True)) == {"done"}
    # The first one's task, coming late, finds it done and stores nothing again.
    assert inbound_process(event=_as_read(first, by_task)) == "accepted"
    assert Message.objects.filter(role="user").count() == 2


@pytest.mark.parametrize("by_task", [True, False])
def test_a_message_waits_while_the_senders_earlier_one_is_in_another_tasks_hands(two_waiting, by_task):
    from channels_app.receive import InboundBusy, inbound_process

    first, second = two_waiting
    InboundEvent.objects.filter(pk=first.pk).update(state=InboundEvent.State.PROCESSING)  # claimed a moment ago
    with pytest.raises(InboundBusy):
        inbound_process(event=_as_read(second, by_task))
    assert not Message.objects.exists()
    assert InboundEvent.objects.get(pk=second.pk).state == InboundEvent.State.PENDING


def _photo_update(text: str = "look", *, big_size: int = 50000) -> dict:
    update = telegram_update("", caption=text, photo=[
        {"file_id": "small", "file_unique_id": "s", "width": 90, "height": 90, "file_size": 1000},
        {"file_id": "big", "file_unique_id": "b", "width": 800, "height": 800, "file_size": big_size},
    ])
    update["message"].pop("text")
    return update


def _script_photo(platform, *, file: Canned | None = None) -> None:
    platform.script(r"/getFile", Canned(body={"ok": True, "result": {"file_id": "big", "file_path": "photos/p.jpg"}}))
    platform.script(r"/file/bot111:AAA/photos/p.jpg", file or Canned(raw=b"\xff\xd8\xff\xe0JPEGDATA"))


def test_a_telegram_photo_becomes_an_image_row(client, world, telegram, platform, model_server, drain):
    pair(world, "telegram", "42", world.alice)
    _script_photo(platform)
    model_server.add(reply("Nice photo"))
    post_telegram(client, _photo_update())
    drain()
    image = Image.objects.get()
    assert (image.mime_type, image.size, image.tenant) == ("image/jpeg", 12, world.tenant_a)
    assert image.message.content == "look"
    assert platform.sent(r"/getFile")[0].path.endswith("file_id=big")
    assert platform.sent("sendMessage")[0].json["text"] == "Nice photo"


@pytest.mark.parametrize("vision", [True, False])
def test_a_telegram_photo_reaches_the_model_as_an_image_part_or_a_note(client, world, telegram, platform,
                                                                        model_server, drain, vision):
    import base64

    pair(world, "telegram", "42", world.alice)
    world.qor_a.main_vision = vision
    world.qor_a.save(update_fields=["main_vision"])
    _script_photo(platform)
    model_server.add(reply("A JPEG."))
    post_telegram(client, _photo_update("what is this?"))
    drain()
    content = model_server.requests[0]["messages"][-1]["content"]
    if vision:
        assert content == [{"type": "text", "text": "[telegram] Priya: what is this?"},
                           {"type": "image_url", "image_url": {
                               "url": "data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8\xff\xe0JPEGDATA").decode()}}]
    else:
        assert content == "[telegram] Priya: what is this? [image: image/jpeg, 1 KB]"


def test_a_telegram_webhook_names_the_photo_and_the_processing_task_fetches_it(
    client, world, telegram, platform, model_server, drain
):
    pair(world, "telegram", "42", world.alice)
    _script_photo(platform)
    model_server.add(reply("Nice photo"))
    # Inside a transaction nothing queued after commit runs yet: what happened by the time
    # the webhook answered is all the webhook did.
    with transaction.atomic():
        assert post_telegram(client, _photo_update()).status_code == 200
        assert platform.requests == []
        event = InboundEvent.objects.get()
        assert event.payload["media"] == [{"kind": "photo", "file_id": "big", "mime_type": "image/jpeg",
                                           "size": 50000, "url": "", "name": ""}]
        assert event.payload["images"] == []
    drain()
    assert [r.path.split("?")[0] for r in platform.requests[:2]] == [
        "/telegram/bot111:AAA/getFile", "/telegram/file/bot111:AAA/photos/p.jpg"
    ]
    image = Image.objects.get()
    assert (image.message.content, image.size) == ("look", 12)


@pytest.mark.parametrize("failure", ["getFile fails", "file fails", "file too big", "said to be too big"])
def test_a_telegram_photo_that_cannot_be_fetched_leaves_the_text_stored_and_answered(
    client, world, telegram, platform, model_server, drain, caplog, failure
):
    pair(world, "telegram", "42", world.alice)
    if failure == "getFile fails":
        platform.script(r"/getFile", Canned(status=500, body={"ok": False, "description": "Internal Server Error"}))
    elif failure == "file fails":
        _script_photo(platform, file=Canned(status=500, raw=b"nope"))
    elif failure == "file too big":
        _script_photo(platform, file=Canned(raw=b"\0" * (MAX_PHOTO_BYTES + 1)))
    model_server.add(reply("I could not see the photo, but hello"))
    update = _photo_update(big_size=MAX_PHOTO_BYTES + 1 if failure == "said to be too big" else 50000)
    assert post_telegram(client, update).status_code == 200
    drain()
    assert not Image.objects.exists()
    assert list(Message.objects.order_by("seq").values_list("role", "content")) == [
        ("user", "look"), ("assistant", "I could not see the photo, but hello")
    ]
    assert platform.sent("sendMessage")[0].json["text"] == "I could not see the photo, but hello"
    # The model is told, so its answer can say so.
    assert model_server.requests[0]["messages"][-1]["content"] == (
        "[telegram] Priya: look [an attachment sent with this could not be kept: too large, unreachable, "
        "or not an image, a PDF, a text file or audio]")
    assert InboundEvent.objects.get().state == InboundEvent.State.DONE
    if failure == "said to be too big":
        assert platform.sent(r"/getFile") == []  # not fetched only to be thrown away
    warnings = [r.getMessage() for r in caplog.records if r.name == "channels_app.adapters.telegram"]
    assert warnings and "photo" in warnings[0]
    assert "111:AAA" not in caplog.text  # the bot token never reaches the log


def test_telegram_group_messages_get_their_own_session_and_are_answered_only_when_mentioned(
    client, world, telegram, platform, model_server, drain
):
    pair(world, "telegram", "42", world.alice)  # a member: the Qor answers paired people in groups
    model_server.default = reply("Hi family!")
    post_telegram(client, telegram_update("dinner at 8?", chat_id=-100777, chat_type="supergroup", message_id=1))
    post_telegram(client, telegram_update("@aria_bot what's for dinner?", chat_id=-100777, chat_type="supergroup",
                                          message_id=2, entities=[{"type": "mention", "offset": 0, "length": 9}]))
    drain()
    session = Session.objects.get()
    assert (session.kind, session.channel, session.external_thread_id) == ("group", "telegram", "-100777")
    assert len(model_server.requests) == 1  # the unaddressed message was stored, not answered
    assert [m["content"] for m in model_server.requests[0]["messages"][1:]] == [
        "[telegram] Priya: dinner at 8?", "[telegram] Priya: @aria_bot what's for dinner?"
    ]
    (sent,) = platform.sent("sendMessage")
    assert sent.json["chat_id"] == "-100777"


def test_in_a_group_a_command_is_answered_only_when_it_names_this_bot(client, world, telegram, platform, drain):
    """Commands in a group are for the bot they name (Telegram appends @botname): one for
    another bot, or a bare one nobody addressed to us, is chatter, not ours to answer with
    the group's history or our status."""
    pair(world, "telegram", "9", world.bob)  # a member: the Qor answers paired people in groups
    group = dict(chat_id=-100777, chat_type="supergroup")
    post_telegram(client, telegram_update("dinner at 8? my number is 555-0199", message_id=1, **group))
    post_telegram(client, telegram_update("/history@quiz_bot 5", user_id=9, message_id=2, **group))
    post_telegram(client, telegram_update("/status", user_id=9, message_id=3, **group))
    drain()
    assert platform.sent("sendMessage") == []
    post_telegram(client, telegram_update("/status@aria_bot", user_id=9, message_id=4, **group))
    drain()
    (sent,) = platform.sent("sendMessage")
    assert sent.json["chat_id"] == "-100777" and "Aria" in sent.json["text"]


def test_a_telegram_group_reply_to_the_bots_message_is_answered_and_a_reply_to_someone_else_is_not(
    client, world, telegram, platform, model_server, drain
):
    pair(world, "telegram", "42", world.alice)  # a member: the Qor answers paired people in groups
    model_server.default = reply("Eight it is.")
    bot = {"id": 111, "is_bot": True, "first_name": "Aria", "username": "aria_bot"}  # 111: its token's number
    friend = {"id": 7, "is_bot": False, "first_name": "Ravi"}
    said = {"message_id": 5, "chat": {"id": -100777, "type": "supergroup"}, "date": 1, "text": "Dinner at 8?"}
    post_telegram(client, telegram_update("ok, book it", chat_id=-100777, chat_type="supergroup", message_id=6,
                                          reply_to_message={**said, "from": bot}))
    post_telegram(client, telegram_update("me too", chat_id=-100777, chat_type="supergroup", message_id=7,
                                          reply_to_message={**said, "message_id": 4, "from": friend}))
    drain()
    assert len(model_server.requests) == 1
    assert model_server.requests[0]["messages"][-1]["content"] == "[telegram] Priya: ok, book it"
    (sent,) = platform.sent("sendMessage")
    assert sent.json["chat_id"] == "-100777"


def test_whatsapp_verification_handshake(client, world, whatsapp):
    ok = client.get("/v1/webhooks/whatsapp", {"hub.mode": "subscribe", "hub.verify_token": "wa-verify",
                                               "hub.challenge": "1158201444"})
    assert ok.status_code == 200 and ok.content == b"1158201444"
    bad = client.get("/v1/webhooks/whatsapp", {"hub.mode": "subscribe", "hub.verify_token": "nope",
                                                "hub.challenge": "x"})
    assert bad.status_code == 403


def test_whatsapp_verification_finds_its_binding_by_an_index_not_by_reading_every_one(client, world, whatsapp):
    """Meta's handshake names no account, only the verify token: every enabled WhatsApp
    binding of every workspace was read and compared, for each unsigned GET anyone sent."""
    for n in range(5):
        binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="whatsapp",
                       credentials={"phone_number_id": f"20{n}", "token": "t", "app_secret": "s",
                                    "verify_token": f"globex-verify-{n}"})
    ok = client.get("/v1/webhooks/whatsapp", {"hub.mode": "subscribe", "hub.verify_token": "globex-verify-3",
                                               "hub.challenge": "77"})
    assert ok.status_code == 200 and ok.content == b"77"
    found = bindings_by_verify_token(kind="whatsapp", token="globex-verify-3")
    assert "binding_verify_idx" in query_plan(*found.query.sql_with_params())
    whatsapp.enabled = False
    whatsapp.save(update_fields=["enabled"])
    off = client.get("/v1/webhooks/whatsapp", {"hub.mode": "subscribe", "hub.verify_token": "wa-verify",
                                                "hub.challenge": "x"})
    assert off.status_code == 403


def test_whatsapp_message_gets_a_reply_through_the_graph_api(client, world, whatsapp, platform, model_server, drain):
    pair(world, "whatsapp", "15550100", world.alice)
    model_server.add(reply("Hi from WhatsApp"))
    assert post_whatsapp(client, whatsapp_body("hello")).status_code == 200
    drain()
    (sent,) = platform.sent(r"/whatsapp/v21.0/1055/messages")
    assert sent.headers["Authorization"] == "Bearer wa-token"
    assert sent.json["to"] == "15550100" and sent.json["text"]["body"] == "Hi from WhatsApp"
    assert sent.json["messaging_product"] == "whatsapp"


@pytest.mark.parametrize("secret", [None, "not-the-app-secret"])
def test_whatsapp_with_a_bad_or_missing_signature_is_rejected(client, world, whatsapp, platform, secret):
    response = post_whatsapp(client, whatsapp_body("hello"), app_secret=secret)
    assert response.status_code == 401
    assert not InboundEvent.objects.exists() and not Message.objects.exists()


def test_whatsapp_status_callbacks_are_ignored_with_200(client, world, whatsapp, platform, drain):
    body = whatsapp_body("x")
    value = body["entry"][0]["changes"][0]["value"]
    value.pop("messages")
    value["statuses"] = [{"id": "wamid.1", "status": "delivered", "recipient_id": "15550100"}]
    assert post_whatsapp(client, body).status_code == 200
    drain()
    assert not InboundEvent.objects.exists() and not platform.requests


@pytest.mark.parametrize("value", [
    {"messages": "x"}, {"messages": [5]}, {"messages": [{"from": "15550100", "id": "wamid.1", "type": "text",
                                                         "text": "hi"}]},
    {"contacts": "x"}, {"contacts": [5]}, {"contacts": [{"wa_id": "15550100", "profile": "Priya"}]},
])
def test_a_well_signed_whatsapp_notification_of_an_unknown_shape_is_ignored_with_200(client, world, whatsapp, caplog,
                                                                                      value):
    body = whatsapp_body("hello")
    body["entry"][0]["changes"][0]["value"].update(value)
    with caplog.at_level(logging.ERROR):
        assert post_whatsapp(client, body).json() == {"ok": True}  # Meta stops sending it again
    assert not InboundEvent.objects.exists() and not Message.objects.exists()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_replayed_whatsapp_message_is_answered_once(client, world, whatsapp, platform, model_server, drain):
    pair(world, "whatsapp", "15550100", world.alice)
    model_server.default = reply("once")
    body = whatsapp_body("hello", message_id="wamid.SAME")
    post_whatsapp(client, body)
    post_whatsapp(client, body)
    drain()
    assert Message.objects.filter(role="user").count() == 1
    assert len(platform.sent("/messages")) == 1


def test_the_same_user_on_telegram_and_whatsapp_shares_one_conversation(
    client, world, telegram, whatsapp, platform, model_server, drain
):
    pair(world, "telegram", "42", world.alice)
    pair(world, "whatsapp", "15550100", world.alice)
    model_server.add(reply("Noted, you parked on level 3."), reply("Level 3."))
    post_telegram(client, telegram_update("I parked on level 3"))
    drain()
    post_whatsapp(client, whatsapp_body("where did I park?"))
    drain()
    assert Session.objects.count() == 1
    history = [m["content"] for m in model_server.requests[1]["messages"][1:]]
    assert history == ["[telegram] Priya: I parked on level 3", "Noted, you parked on level 3.",
                       "[whatsapp] Priya: where did I park?"]
    assert platform.sent("/whatsapp/")[0].json["text"]["body"] == "Level 3."


def test_a_long_reply_with_a_code_block_reaches_telegram_in_three_parts_with_the_code_intact(
    client, world, telegram, platform, model_server, drain
):
    pair(world, "telegram", "42", world.alice)
    code = "```python\n" + "".join(f"print('step {i}')\n" for i in range(100)) + "```"
    prose = ("All work and no play makes a dull assistant. " * 60).strip()
    text = prose[:2500] + "\n\n" + code + "\n\n" + prose
    text = (text + " tail" * 2000)[:9000]
    model_server.add(reply(text))
    post_telegram(client, telegram_update("write it"))
    drain()
    parts = [r.json["text"] for r in platform.sent("sendMessage")]
    assert len(parts) == 3
    assert all(len(visible_text(p)) <= 4096 for p in parts)  # Telegram counts the text it shows
    block = '<pre><code class="language-python">' + "".join(f"print('step {i}')\n" for i in range(100)).rstrip()
    assert sum(p.count(block + "</code></pre>") for p in parts) == 1  # the code block arrives whole in one part
    assert OutboundDelivery.objects.filter(state="sent").count() == 3


def test_telegram_429_with_retry_after_is_honoured_and_delivered_once(
    client, world, telegram, platform, model_server, drain
):
    pair(world, "telegram", "42", world.alice)
    platform.script(r"sendMessage", Canned(status=429, body={
        "ok": False, "error_code": 429, "description": "Too Many Requests: retry after 1",
        "parameters": {"retry_after": 1}}))
    model_server.add(reply("eventually"))
    post_telegram(client, telegram_update("hi"))
    drain()
    attempts = platform.sent("sendMessage")
    assert len(attempts) == 2  # the 429, then the one that went through
    delivery = OutboundDelivery.objects.get()
    assert delivery.state == "sent" and delivery.attempts == 2
    assert delivery.last_error == ""  # sent: the 429 of the first try is not its error


@pytest.mark.parametrize("code, said", [(130429, "Rate limit hit"), (131048, "Spam rate limit hit"),
                                         (131056, "(Business Account, Consumer Account) pair rate limit hit")])
def test_a_whatsapp_rate_limit_answered_with_400_is_tried_again_and_the_reply_arrives_once(
    client, world, whatsapp, platform, model_server, drain, settings, code, said
):
    """Meta answers its rate limits (the number's throughput, its spam limit, too many
    messages to one person) with HTTP 400 and its own code: later, the reply gets there."""
    settings.QORVEN_SEND_BACKOFF = 0.05
    pair(world, "whatsapp", "15550100", world.alice)
    sent = r"/whatsapp/v21.0/1055/messages"
    platform.script(sent, Canned(400, {"error": {"message": f"(#{code}) {said}", "type": "OAuthException",
                                                 "code": code}}))
    platform.default(sent, Canned(body={"messaging_product": "whatsapp", "messages": [{"id": "wamid.OUT1"}]}))
    model_server.add(reply("Your meeting is at 3."))
    assert post_whatsapp(client, whatsapp_body("when is my meeting?")).status_code == 200
    drain()
    assert [s.json["text"]["body"] for s in platform.sent(sent)] == ["Your meeting is at 3."] * 2
    delivery = OutboundDelivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.last_error) == ("sent", 2, "")
    assert not Message.objects.filter(role="system").exists()  # no notice: it got there


def test_a_4xx_send_is_not_retried(client, world, telegram, platform, model_server, drain):
    pair(world, "telegram", "42", world.alice)
    platform.script(r"sendMessage", Canned(status=400, body={"ok": False, "description": "Bad Request: message is too long"}))
    model_server.add(reply("lost"))
    post_telegram(client, telegram_update("hi"))
    drain()
    # Once, then our notice that it did not get there (which the platform takes).
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["lost", UNSEEN]
    assert OutboundDelivery.objects.get(message__role="assistant").state == "failed"


def test_a_switched_off_channel_answers_404_for_that_tenant(client, world, telegram, platform):
    from tenancy.models import PluginSetting

    PluginSetting.objects.create(tenant=world.tenant_a, kind="channel", name="telegram", enabled=False)
    assert post_telegram(client, telegram_update("hi")).status_code == 404
    assert not InboundEvent.objects.exists()


def test_no_bot_token_or_secret_reaches_the_logs(client, world, telegram, platform, model_server, drain, caplog):
    import logging

    caplog.set_level(logging.DEBUG)  # everything our loggers say; httpx stays at settings.LOGGING's level
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("hi"))
    post_telegram(client, telegram_update("hello"))
    post_telegram(client, telegram_update("x"), secret="wrong")
    drain()
    assert platform.sent("sendMessage")
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "111:AAA" not in logged and "tg-secret-a" not in logged


@pytest.mark.parametrize("sender", ["unknown", "paired"])
def test_a_whatsapp_senders_number_a_refusal_quotes_is_masked_in_the_log_and_the_ids_are_not(
        client, world, whatsapp, platform, model_server, drain, caplog, sender):
    """WhatsApp names a sender by their number, without the + the log's masking looked for:
    a refused pairing code or reply whose error quoted the number wrote it whole. It is
    masked where the log knows it for the sender's; the message ids stay readable."""
    import logging

    caplog.set_level(logging.DEBUG)
    number = "15551234567"
    if sender == "paired":
        pair(world, "whatsapp", number, world.alice)
    model_server.default = reply("Hi")
    platform.default(r"/whatsapp/v21.0/1055/messages$", Canned(status=400, body={"error": {
        "message": f"(#131030) Recipient phone number {number} not in allowed list", "code": 131030}}))
    assert post_whatsapp(client, whatsapp_body("hello", sender=number)).status_code == 200
    drain()
    assert platform.sent("/messages")
    # A reply's refusal, then our notice's that it did not get there: the same refusal.
    refused, *notice = [r.getMessage() for r in caplog.records if "131030" in r.getMessage()]
    assert len(notice) == (1 if sender == "paired" else 0)
    assert number not in caplog.text, refused
    assert "Recipient phone number 15… not in allowed list" in refused
    if sender == "paired":
        answer = Message.objects.get(role="assistant")
        assert refused.startswith(f"delivery of message {answer.pk} part 0 failed for good")


def test_an_unreadable_update_is_logged_without_its_text_or_sender(client, world, telegram, platform, drain, caplog):
    """Pydantic's error quotes the input it could not read: the whole message, its text
    and its sender's id and name, went to the log. The log says where it failed."""
    import logging

    caplog.set_level(logging.INFO)
    update = telegram_update("my therapy notes", user_id=987654321, first_name="Priya")
    del update["message"]["chat"]
    assert post_telegram(client, update).status_code == 200
    drain()
    (line,) = [r.getMessage() for r in caplog.records if "unreadable Telegram update" in r.getMessage()]
    assert "therapy" not in line and "987654321" not in line and "Priya" not in line
    assert "chat" in line  # where it failed


def test_a_group_chats_digest_reaches_each_paired_member_who_spoke(client, world, telegram, platform, model_server,
                                                                   drain):
    from memory_app.compaction import compaction_rotate
    from memory_app.models import Memory
    from memory_app.selectors import memory_search

    from ..fakes.summarizer import FakeModel

    model_server.default = FakeModel()
    pair(world, "telegram", "42", world.alice)
    pair(world, "telegram", "43", world.bob)
    group = dict(chat_id=-100555, chat_type="supergroup")
    post_telegram(client, telegram_update("picnic on Sunday at the lake?", message_id=1, **group))
    post_telegram(client, telegram_update("I'll bring the lemonade", user_id=43, first_name="Bob", message_id=2,
                                          **group))
    post_telegram(client, telegram_update("count me in", user_id=77, first_name="Zed", message_id=3, **group))
    drain()
    session = Session.objects.get(kind="group")
    compaction_rotate(session=session)

    digests = Memory.objects.filter(type="conversation_digest", source_session_id=session.pk)
    assert sorted(d.user.username for d in digests) == ["alice", "bob"]  # not Zed: unpaired
    assert memory_search(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="summary")
    assert not memory_search(tenant=world.tenant_a, qor=world.qor_a, user=world.charlie, query="summary")


def test_a_telegram_message_with_nothing_to_read_is_not_a_turn(client, world, telegram, platform, model_server,
                                                               drain):
    """A sticker, a location, a contact or a poll: no text and nothing fetched. As on
    every other surface, nothing to answer — not an empty message in the chat and in
    every later prompt."""
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("an answer to nothing")
    update = telegram_update("", message_id=11)
    del update["message"]["text"]
    update["message"]["sticker"] = {"file_id": "CAACAgIAAx", "file_unique_id": "AgAD", "type": "regular",
                                    "width": 512, "height": 512, "is_animated": False, "is_video": False, "emoji": "👍"}
    assert post_telegram(client, update).status_code == 200
    drain()
    assert model_server.requests == [] and not Message.objects.exists()


@pytest.mark.parametrize("kind, content, stored", [
    ("interactive", {"type": "button_reply", "button_reply": {"id": "yes", "title": "Yes, book it"}}, "Yes, book it"),
    ("interactive", {"type": "list_reply", "list_reply": {"id": "t2", "title": "Tuesday"}}, "Tuesday"),
    ("button", {"payload": "p", "text": "Confirm"}, "Confirm"),
    ("video", {"id": "media-9", "mime_type": "video/mp4"}, ""),
])
def test_a_whatsapp_button_tap_or_a_file_is_a_message_not_silence(client, world, whatsapp, platform, model_server,
                                                                  drain, kind, content, stored):
    """A tap on a reply button or a list, or a document sent alone, was dropped: nothing
    stored, nothing answered. A tap is its title; a file we do not keep counts as left out,
    so the model can say so."""
    pair(world, "whatsapp", "15550100", world.alice)
    model_server.default = reply("Noted.")
    body = whatsapp_body("")
    raw = body["entry"][0]["changes"][0]["value"]["messages"][0]
    del raw["text"]
    raw.update({"type": kind, kind: content})
    assert post_whatsapp(client, body).status_code == 200
    drain()
    message = Message.objects.get(role="user")
    assert message.content == stored
    if not stored:
        assert message.metadata.get("left_out") == 1
    assert Message.objects.filter(role="assistant", content="Noted.").exists()


def test_the_task_whose_claim_a_lost_database_kept_takes_it_again_at_once(two_waiting, drain):
    """Its connection was lost mid-event and the database was still away when it tried to
    give the claim back: its retry a second later takes the event again (it waited two
    minutes for the claim to go stale, and the sender's later messages with it)."""
    from channels_app.receive import InboundBusy, inbound_process

    first, second = two_waiting
    InboundEvent.objects.filter(pk=first.pk).update(state=InboundEvent.State.PROCESSING)  # the claim left behind
    with pytest.raises(InboundBusy):  # anyone else waits for it
        inbound_process(event=_as_read(second, True))
    assert inbound_process(event=_as_read(first, True), reclaim=first.pk) == "accepted"
    assert inbound_process(event=_as_read(second, True)) == "accepted"
    drain()
    users = list(Message.objects.filter(role="user").order_by("seq").values_list("content", flat=True))
    assert users == ["first", "second"]


def test_a_message_stored_before_its_channel_was_switched_off_is_not_answered_and_one_after_it_is_back_is(
    world, telegram, platform, model_server
):
    """The task reads the channel's switch afresh for every message — with the event it
    takes (channels_app.receive.inbound_event), no longer in a statement of its own — so a
    message a webhook stored just before Telegram was switched off gets no answer, and the
    next one, once it is switched on again, does."""
    from channels_app.inbound import InboundMessage
    from channels_app.tasks import inbound_process_task
    from tenancy.models import PluginSetting

    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Back again."))
    results = []
    for n, enabled in ((1, False), (2, True)):
        message = InboundMessage(channel="telegram", external_id=f"42:{n}", sender_id="42", sender_name="Alice",
                                 text=f"message {n}", reply_target="42")
        event = InboundEvent.objects.create(tenant=world.tenant_a, binding=telegram, external_id=message.external_id,
                                            sender_id="42", payload=message.model_dump(mode="json"))
        PluginSetting.objects.update_or_create(tenant=world.tenant_a, kind="channel", name="telegram",
                                               defaults={"enabled": enabled})
        results.append(inbound_process_task.apply(args=(world.tenant_a.pk, event.pk)).result)
    assert results == ["switched-off", "accepted"]
    assert list(Message.objects.filter(role="user").values_list("content", flat=True)) == ["message 2"]
    assert [sent.json["text"] for sent in platform.sent(r"/telegram/bot111:AAA/sendMessage")] == ["Back again."]
    assert len(model_server.requests) == 1
