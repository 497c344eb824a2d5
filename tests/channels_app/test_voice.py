"""Voice notes: transcribed through the Qor's transcriber route (the model server's
/v1/audio/transcriptions) and answered like text, the audio kept with the message; with no
transcriber, or a note that cannot be made out, one notice of ours and no model call."""
from __future__ import annotations

import base64

import pytest

from sessions_app.models import Image, Message

from ..fakes.model_server import error, reply
from ..fakes.platform_server import Canned
from .conftest import pair
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

OGG = b"OggS\x00\x02" + b"\x01" * 200  # what Telegram serves for a voice note (OGG/Opus)


def voice_update(message_id=1, **extra):
    update = telegram_update("", message_id=message_id, **extra)
    del update["message"]["text"]
    update["message"]["voice"] = {"file_id": "vn-1", "file_unique_id": "u1", "duration": 3, "mime_type": "audio/ogg",
                                  "file_size": len(OGG)}
    return update


def script_voice(platform):
    platform.script(r"/getFile", Canned(body={"ok": True, "result": {"file_id": "vn-1", "file_path": "voice/f.oga"}}))
    platform.script(r"/file/bot111:AAA/voice/f.oga", Canned(raw=OGG))


def with_transcriber(world, model="whisper-1"):
    world.qor_a.transcriber_model = model
    world.qor_a.save(update_fields=["transcriber_model"])


def test_a_telegram_voice_note_is_transcribed_and_answered_like_text(client, world, telegram, platform, model_server,
                                                                     drain):
    pair(world, "telegram", "42", world.alice)
    with_transcriber(world)
    script_voice(platform)
    model_server.transcripts.append("Remind me to water the orchid tonight.")
    model_server.add(reply("I'll remind you at 8 pm."))
    post_telegram(client, voice_update())
    drain()

    (heard,) = model_server.transcriptions
    assert (heard["model"], heard["audio"], heard["content_type"]) == ("whisper-1", OGG, "audio/ogg")
    message = Message.objects.get(role="user")
    assert message.content == "Remind me to water the orchid tonight."
    assert message.metadata["voice"] == "transcript" and message.metadata["attachments"][0]["type"] == "audio"
    kept = Image.objects.get(message=message)
    assert (kept.mime_type, base64.b64decode(kept.data)) == ("audio/ogg", OGG)  # the audio stays with it
    assert model_server.requests[0]["messages"][-1]["content"] == (
        "[telegram] Priya: Remind me to water the orchid tonight.")
    assert platform.sent("sendMessage")[-1].json["text"] == "I'll remind you at 8 pm."


def test_without_a_transcriber_the_qor_says_it_cannot_listen_yet(client, world, telegram, platform, model_server,
                                                                 drain):
    pair(world, "telegram", "42", world.alice)
    script_voice(platform)
    post_telegram(client, voice_update())
    drain()
    assert model_server.requests == [] and model_server.transcriptions == []
    stored = Message.objects.get(role="user")
    assert (stored.content, stored.answer_state, stored.metadata["voice"]) == ("[voice note]", None, "not transcribed")
    assert Image.objects.filter(message=stored).count() == 1  # kept all the same
    (sent,) = platform.sent("sendMessage")
    assert sent.json["text"] == "I can't listen to voice notes yet. Could you write it down for me?"


def test_a_voice_note_the_transcriber_refuses_gets_one_notice_and_no_model_call(client, world, telegram, platform,
                                                                               model_server, drain):
    pair(world, "telegram", "42", world.alice)
    with_transcriber(world)
    script_voice(platform)
    model_server.transcripts.append(error(400, "unsupported audio"))
    post_telegram(client, voice_update())
    post_telegram(client, voice_update())  # delivered twice: stored and answered once
    drain()
    assert model_server.requests == []
    assert Message.objects.filter(role="user").count() == 1
    (sent,) = platform.sent("sendMessage")
    assert sent.json["text"].startswith("I couldn't make out that voice note.")
    assert "unsupported audio" not in sent.json["text"]  # never the provider's words


def whatsapp_media(kind: str, media_id: str, mime: str, **fields):
    from .payloads import whatsapp_body

    body = whatsapp_body("", message_id=f"wamid.{media_id}")
    raw = body["entry"][0]["changes"][0]["value"]["messages"][0]
    raw.pop("text")
    raw["type"] = kind
    raw[kind] = {"id": media_id, "mime_type": mime, **fields}
    return body


def script_graph_media(platform, media_id: str, data: bytes, mime: str):
    platform.script(rf"/whatsapp/v21.0/{media_id}$", Canned(body={
        "url": f"{platform.url}/whatsapp/v21.0/media-file/{media_id}", "mime_type": mime, "file_size": len(data),
        "id": media_id, "messaging_product": "whatsapp"}))
    platform.script(rf"/media-file/{media_id}", Canned(raw=data))


def test_a_whatsapp_image_and_voice_note_are_fetched_from_the_graph_api(client, world, whatsapp, platform,
                                                                         model_server, drain):
    from .payloads import post_whatsapp

    pair(world, "whatsapp", "15550100", world.alice)
    with_transcriber(world)
    world.qor_a.main_vision = True
    world.qor_a.save(update_fields=["main_vision"])
    jpeg = b"\xff\xd8\xff\xe0" + b"J" * 100
    script_graph_media(platform, "IMG1", jpeg, "image/jpeg")
    script_graph_media(platform, "AUD1", OGG, "audio/ogg; codecs=opus")
    model_server.transcripts.append("What is in the photo I just sent?")
    model_server.add(reply("A receipt."), reply("It is a receipt from the bakery."))
    post_whatsapp(client, whatsapp_media("image", "IMG1", "image/jpeg", caption="my receipt"))
    drain()
    post_whatsapp(client, whatsapp_media("audio", "AUD1", "audio/ogg; codecs=opus", voice=True))
    drain()

    fetched = [r for r in platform.sent(r"/whatsapp/v21.0/") if not r.path.endswith("/messages")]
    assert [r.path.rsplit("/", 1)[-1] for r in fetched] == ["IMG1", "IMG1", "AUD1", "AUD1"]
    assert all(r.headers["Authorization"] == "Bearer wa-token" for r in fetched)
    first = model_server.requests[0]["messages"][-1]["content"]
    assert first[0] == {"type": "text", "text": "[whatsapp] Priya: my receipt"}
    assert first[1]["image_url"]["url"] == "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
    assert model_server.transcriptions[0]["audio"] == OGG
    assert model_server.requests[1]["messages"][-1]["content"] == "[whatsapp] Priya: What is in the photo I just sent?"
    assert [m.mime_type for m in Image.objects.order_by("id")] == ["image/jpeg", "audio/ogg"]


def test_a_whatsapp_media_url_off_metas_hosts_is_not_fetched_with_the_token(client, world, whatsapp, platform,
                                                                              model_server, drain):
    from .payloads import post_whatsapp

    pair(world, "whatsapp", "15550100", world.alice)
    platform.script(r"/whatsapp/v21.0/IMG2$", Canned(body={"url": "http://169.254.169.254/latest/meta-data",
                                                           "mime_type": "image/jpeg", "file_size": 10}))
    model_server.add(reply("Nice caption."))
    post_whatsapp(client, whatsapp_media("image", "IMG2", "image/jpeg", caption="look"))
    drain()
    assert not Image.objects.exists()
    assert model_server.requests[0]["messages"][-1]["content"].startswith(  # answered without it, and told so
        "[whatsapp] Priya: look [an attachment sent with this could not be kept")
