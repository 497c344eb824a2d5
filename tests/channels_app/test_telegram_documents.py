"""Files sent on Telegram as documents (a PDF, a text file, a photo sent "as a file"):
named by the webhook, fetched by the processing task, kept by their content like every
other surface's, and the rest counted so the model can say what it could not open."""
from __future__ import annotations

import base64
import io

import pytest
from django.db import transaction
from PIL import Image as PILImage

from channels_app.models import InboundEvent
from sessions_app.models import Image, Message

from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from ..pdf_files import pdf
from .conftest import pair
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

LEFT_OUT = ("[an attachment sent with this could not be kept: too large, unreachable, "
            "or not an image, a PDF, a text file or audio]")


def _document_update(name: str, mime: str, size: int, *, caption: str = "", file_id: str = "doc-1",
                     **fields) -> dict:
    update = telegram_update("", **fields)
    del update["message"]["text"]
    update["message"]["document"] = {"file_id": file_id, "file_unique_id": "u1", "file_name": name,
                                     "mime_type": mime, "file_size": size}
    if caption:
        update["message"]["caption"] = caption
    return update


def _script_file(platform, content: bytes, path: str = "documents/file_7.bin") -> None:
    platform.script(r"/getFile", Canned(body={"ok": True, "result": {"file_id": "doc-1", "file_path": path}}))
    platform.script(rf"/file/bot111:AAA/{path}", Canned(raw=content))


def _last_user(model_server) -> str | list:
    return [m for m in model_server.requests[-1]["messages"] if m["role"] == "user"][-1]["content"]


def test_a_text_file_sent_alone_reaches_the_qor_with_its_name_and_text(client, world, telegram, platform,
                                                                       model_server, drain):
    pair(world, "telegram", "42", world.alice)
    notes = "Pack: passport, charger, 3 shirts\n".encode()
    _script_file(platform, notes, "documents/file_7.txt")
    model_server.add(reply("Your packing list has three items."))
    # The webhook names the file only; the processing task fetches it.
    with transaction.atomic():
        assert post_telegram(client, _document_update("packing.txt", "text/plain", len(notes))).status_code == 200
        assert platform.requests == []
        assert InboundEvent.objects.get().payload["media"] == [
            {"kind": "file", "file_id": "doc-1", "mime_type": "text/plain", "size": len(notes), "url": "",
             "name": "packing.txt"}]
    drain()
    image = Image.objects.get()
    assert (image.mime_type, image.name, image.size, image.tenant) == ("text/plain", "packing.txt", len(notes),
                                                                       world.tenant_a)
    assert base64.b64decode(image.data) == notes
    message = Message.objects.get(role="user")
    assert message.metadata["attachments"] == [
        {"type": "file", "mime_type": "text/plain", "size": len(notes), "name": "packing.txt"}]
    assert _last_user(model_server) == ("[telegram] Priya: [file: packing.txt, text/plain, 1 KB]\n"
                                        "Pack: passport, charger, 3 shirts\n\n[end of packing.txt]")
    assert platform.sent("sendMessage")[0].json["text"] == "Your packing list has three items."
    assert "111:AAA" not in str(platform.sent(r"/getFile")[0].path.split("?")[1])


def test_a_pdf_with_a_caption_is_kept_by_its_content_with_its_name(client, world, telegram, platform, model_server,
                                                                   drain):
    pair(world, "telegram", "42", world.alice)
    data = pdf("Invoice 77: 40 EUR, due Friday")
    # The name and the type Telegram passes on are the sender's: the content decides.
    _script_file(platform, data)
    model_server.add(reply("Got the invoice."))
    post_telegram(client, _document_update("../invoice.pdf", "application/octet-stream", len(data),
                                           caption="here is the invoice"))
    drain()
    image = Image.objects.get()
    assert (image.mime_type, image.name, image.message.content) == ("application/pdf", "invoice.pdf",
                                                                    "here is the invoice")
    assert _last_user(model_server) == ("[telegram] Priya: here is the invoice [file: invoice.pdf, application/pdf, "
                                        "1 KB]\nInvoice 77: 40 EUR, due Friday\n[end of invoice.pdf]")


def test_a_photo_sent_as_a_file_is_an_image(client, world, telegram, platform, model_server, drain):
    pair(world, "telegram", "42", world.alice)
    world.qor_a.main_vision = True
    world.qor_a.save(update_fields=["main_vision"])
    out = io.BytesIO()
    PILImage.new("RGB", (8, 6), "orange").save(out, format="PNG")
    png = out.getvalue()
    _script_file(platform, png, "documents/file_9.png")
    model_server.add(reply("An orange square."))
    post_telegram(client, _document_update("IMG_0042.png", "image/png", len(png)))
    drain()
    image = Image.objects.get()
    assert (image.mime_type, image.size) == ("image/png", len(png))
    assert _last_user(model_server) == [
        {"type": "text", "text": "[telegram] Priya: "},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}]


@pytest.mark.parametrize("case", ["not a kind kept", "said to be too big", "file too big", "getFile fails"])
def test_a_document_that_cannot_be_kept_is_counted_and_the_model_told(client, world, telegram, platform,
                                                                      model_server, drain, settings, caplog, case):
    pair(world, "telegram", "42", world.alice)
    settings.QORVEN_MAX_UPLOAD = 1000
    if case == "not a kind kept":
        _script_file(platform, b"PK\x03\x04\x14\x00\x00\x00zipped")
    elif case == "file too big":
        _script_file(platform, b"x" * 1001)
    elif case == "getFile fails":
        platform.script(r"/getFile", Canned(status=400, body={"ok": False, "description": "Bad Request"}))
    model_server.add(reply("I could not open that file."))
    size = 5000 if case == "said to be too big" else 20
    post_telegram(client, _document_update("archive.zip", "application/zip", size))
    drain()
    assert not Image.objects.exists()
    message = Message.objects.get(role="user")
    assert (message.content, message.metadata["left_out"]) == ("", 1)
    assert _last_user(model_server) == f"[telegram] Priya: {LEFT_OUT}"
    assert platform.sent("sendMessage")[0].json["text"] == "I could not open that file."
    if case == "said to be too big":
        assert platform.sent(r"/getFile") == []  # not fetched only to be thrown away
    assert "111:AAA" not in caplog.text


def test_a_gif_is_counted_as_left_out_without_being_fetched(client, world, telegram, platform, model_server,
                                                              drain):
    """Telegram sends an animation (an MP4 without sound) with a `document` beside it: it is
    not fetched only to be refused."""
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("I cannot play that."))
    update = _document_update("funny.mp4", "video/mp4", 90000, caption="lol")
    update["message"]["animation"] = {"file_id": "doc-1", "file_unique_id": "u1", "width": 320, "height": 240,
                                      "duration": 3, "mime_type": "video/mp4", "file_size": 90000}
    post_telegram(client, update)
    drain()
    assert platform.sent(r"/getFile") == []
    message = Message.objects.get(role="user")
    assert (message.content, message.metadata["left_out"]) == ("lol", 1)
    assert _last_user(model_server) == f"[telegram] Priya: lol {LEFT_OUT}"


def test_in_a_group_a_document_is_answered_only_when_its_caption_mentions_the_bot(client, world, telegram, platform,
                                                                                  model_server, drain):
    pair(world, "telegram", "42", world.alice)
    group = dict(chat_id=-100777, chat_type="supergroup")
    _script_file(platform, b"minutes of the meeting\n", "documents/a.txt")
    post_telegram(client, _document_update("minutes.txt", "text/plain", 23, message_id=1, **group))
    drain()
    assert model_server.requests == [] and platform.sent("sendMessage") == []
    _script_file(platform, b"budget: 1200\n", "documents/b.txt")
    model_server.add(reply("The budget is 1200."))
    post_telegram(client, _document_update("budget.txt", "text/plain", 13, caption="@aria_bot summarise",
                                           message_id=2, **group))
    drain()
    assert Image.objects.count() == 2
    users = [m["content"] for m in model_server.requests[0]["messages"] if m["role"] == "user"]
    assert users == [
        "[telegram] Priya: [file: minutes.txt, text/plain, 1 KB]\nminutes of the meeting\n\n[end of minutes.txt]",
        "[telegram] Priya: @aria_bot summarise [file: budget.txt, text/plain, 1 KB]\nbudget: 1200\n\n"
        "[end of budget.txt]",
    ]
    (sent,) = platform.sent("sendMessage")
    assert sent.json["chat_id"] == "-100777"
