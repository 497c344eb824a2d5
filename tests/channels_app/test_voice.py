"""Voice notes: transcribed through the Qor's transcriber route (the model server's
/v1/audio/transcriptions) and answered like text, the audio kept with the message; with no
transcriber, or a note that cannot be made out, one notice of ours and no model call."""
from __future__ import annotations

import base64
import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app.attachments import images_attach
from sessions_app.models import Image, Message
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.services import api_token_create
from tenancy.trust import Trust

from ..factories.tenancy import MembershipFactory, UserFactory
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


def voice_note_task_lost(world, *, age: timedelta | None = None) -> Message:
    """Alice's voice note on the web chat, stored as inbound_accept stores one and its
    transcription task never run (it lived in the memory of a server that stopped);
    stored `age` ago."""
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    audio = type("Audio", (), {"mime_type": "audio/ogg", "data": base64.b64encode(OGG).decode(), "size": len(OGG)})()
    note = message_append(session=chat, role="user", content="[voice note]", channel="web", sender_name="Alice",
                          awaits_answer=True, metadata={"trust": Trust.OWNER, "voice": "pending",
                                                        "attachments": [{"type": "audio", "mime_type": "audio/ogg",
                                                                         "size": len(OGG)}]}).message
    images_attach(message=note, images=[audio])
    if age is not None:
        Message.objects.filter(pk=note.pk).update(created_at=timezone.now() - age)
    return note


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


def test_a_whatsapp_document_is_fetched_and_kept_like_an_email_attachment(client, world, whatsapp, platform,
                                                                         model_server, drain):
    """A PDF sent on WhatsApp was counted as left out: the model could only say it could
    not open it."""
    from .payloads import post_whatsapp

    pair(world, "whatsapp", "15550100", world.alice)
    pdf = b"%PDF-1.4\n%%EOF\n"
    script_graph_media(platform, "DOC1", pdf, "application/pdf")
    model_server.add(reply("It is your lease."))
    post_whatsapp(client, whatsapp_media("document", "DOC1", "application/pdf", filename="lease.pdf",
                                         caption="what is this?"))
    drain()
    assert list(Image.objects.values_list("mime_type", "name")) == [("application/pdf", "lease.pdf")]
    said = model_server.requests[0]["messages"][-1]["content"]
    assert "what is this?" in said and "[file: lease.pdf, application/pdf" in said and "could not be kept" not in said


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


# --- The chat page and the webchat -----------------------------------------------------------

MP3 = b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\xff\xfb\x90\x00" * 50
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 60
M4A = b"\x00\x00\x00\x20ftypM4A \x00\x00\x00\x00M4A mp42isom" + b"\x00" * 60
WEBM = b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01" + b"\x00" * 60


@pytest.mark.parametrize("raw, mime", [(OGG, "audio/ogg"), (MP3, "audio/mpeg"), (b"\xff\xfb\x90\x00" * 50, "audio/mpeg"),
                                       (WAV, "audio/wav"), (M4A, "audio/mp4"), (WEBM, "audio/webm")],
                         ids=["ogg", "mp3-id3", "mp3-frame", "wav", "m4a", "webm"])
def test_audio_uploads_are_recognised_by_their_content_not_their_name(raw, mime):
    from channels_app.uploads import attachment_check

    checked = attachment_check(raw, "recording.bin")
    assert (checked.mime_type, checked.size, base64.b64decode(checked.data)) == (mime, len(raw), raw)


def test_a_voice_note_recorded_on_the_chat_page_is_transcribed_and_answered_like_text(client, world, model_server,
                                                                                       drain):
    from django.core.files.uploadedfile import SimpleUploadedFile

    with_transcriber(world)
    model_server.transcripts.append("Book a table for four on Friday.")
    model_server.add(reply("Booked for Friday at 7."))
    client.force_login(world.alice)
    response = client.post("/chat/api/acme/aria/messages",
                           {"content": "", "image": [SimpleUploadedFile("note.webm", WEBM, "audio/webm")]})
    assert response.status_code == 201
    assert response.json()["message"]["attachments"] == [{"type": "audio", "mime_type": "audio/webm",
                                                          "size": len(WEBM)}]
    drain()
    (heard,) = model_server.transcriptions
    assert (heard["audio"], heard["content_type"]) == (WEBM, "audio/webm")
    message = Message.objects.get(role="user")
    assert (message.content, message.metadata["voice"], message.answer_state) == (
        "Book a table for four on Friday.", "transcript", "answered")
    assert Image.objects.get(message=message).mime_type == "audio/webm"  # the audio stays with it
    assert model_server.requests[0]["messages"][-1]["content"] == "[web] Alice: Book a table for four on Friday."
    timeline = client.get("/chat/api/acme/aria/messages").json()["messages"]
    assert [(m["role"], m["content"]) for m in timeline] == [
        ("user", "Book a table for four on Friday."), ("assistant", "Booked for Friday at 7.")]


def test_a_webchat_voice_note_without_a_transcriber_gets_the_same_notice_as_other_channels(client, world,
                                                                                             model_server, drain):
    import time

    from django.core.files.uploadedfile import SimpleUploadedFile

    from channels_app.services import binding_create
    from channels_app.webchat import webchat_token_sign

    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                   credentials={"key": "wc_v", "secret": "s3cret", "origins": "https://acme.example"})
    token = webchat_token_sign(secret="s3cret", user_id="alice", expires=int(time.time()) + 600)
    response = client.post("/webchat/wc_v/messages", {"content": "", "image": [SimpleUploadedFile("a.mp3", MP3)]},
                           HTTP_X_QORVEN_VISITOR=token)
    assert response.status_code == 201
    drain()
    assert model_server.requests == [] and model_server.transcriptions == []
    stored = Message.objects.get(role="user")
    assert (stored.content, stored.metadata["voice"]) == ("[voice note]", "not transcribed")
    notice = Message.objects.get(role="system")
    assert notice.content == "I can't listen to voice notes yet. Could you write it down for me?"
    assert (notice.channel, notice.metadata["reply_to"]) == ("webchat", stored.seq)


# --- When the transcriber is down for a while ------------------------------------------------

def test_a_transcriber_503_is_tried_again_later_and_the_note_is_then_answered(client, world, telegram, platform,
                                                                              model_server, drain, settings):
    settings.QORVEN_MODEL_RETRIES = 0  # the call's own retries are spent: the task's come next
    settings.QORVEN_VOICE_RETRY_DELAY = 0.05
    pair(world, "telegram", "42", world.alice)
    with_transcriber(world)
    script_voice(platform)
    model_server.transcripts.extend([error(503, "overloaded"), "Call mum at six."])
    model_server.add(reply("I'll remind you at 6."))
    post_telegram(client, voice_update())
    drain()
    assert len(model_server.transcriptions) == 2
    assert Message.objects.get(role="user").content == "Call mum at six."
    assert not Message.objects.filter(role="system").exists()  # no "couldn't make out" notice
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["I'll remind you at 6."]


def test_a_transcriber_that_stays_down_gets_one_notice_after_the_last_try(client, world, telegram, platform,
                                                                          model_server, drain, settings):
    settings.QORVEN_MODEL_RETRIES = 0
    settings.QORVEN_VOICE_RETRY_DELAY = 0.05
    settings.QORVEN_VOICE_RETRIES = 2
    pair(world, "telegram", "42", world.alice)
    with_transcriber(world)
    script_voice(platform)
    model_server.transcripts.extend([error(503, "overloaded")] * 5)
    post_telegram(client, voice_update())
    drain()
    assert len(model_server.transcriptions) == 3  # the first try and two more
    assert model_server.requests == []
    (sent,) = platform.sent("sendMessage")
    assert sent.json["text"].startswith("I couldn't make out that voice note.")
    assert Message.objects.get(role="user").metadata["voice"] == "failed"


def test_a_transcribers_retry_after_is_waited_out_on_the_workers_timer_not_holding_up_another_tenant(
    client, world, telegram, platform, model_server, drain, settings
):
    """The transcriber answers 429 with Retry-After: 20 to as many voice notes at once as
    the worker has slots. The SDK's own retries slept each wait out on the worker's thread,
    four times over: every slot was held, and tenant B's message waited unanswered."""
    slots = settings.QORVEN_WORKER_CONCURRENCY
    with_transcriber(world)
    platform.default(r"/getFile", Canned(body={"ok": True, "result": {"file_id": "vn-1", "file_path": "voice/f.oga"}}))
    platform.default(r"/file/bot111:AAA/voice/f.oga", Canned(raw=OGG))
    model_server.transcripts.extend([error(429, "Rate limit reached", headers={"Retry-After": "20"})] * slots)
    model_server.transcripts.extend(["Call mum at six."] * slots)
    model_server.default = reply("Noted.")
    for n in range(slots):
        person = UserFactory(username=f"speaker{n}")
        MembershipFactory(tenant=world.tenant_a, user=person)
        pair(world, "telegram", str(900 + n), person)
        post_telegram(client, voice_update(message_id=n + 1, user_id=900 + n))
    deadline = time.monotonic() + 10
    while len(model_server.transcriptions) < slots and time.monotonic() < deadline:
        time.sleep(0.05)

    asked_at = time.monotonic()
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": "quick one"}),
                           content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {api_token_create(tenant=world.tenant_b, user=world.charlie)[1]}")
    assert response.status_code == 201
    while not Message.objects.filter(tenant=world.tenant_b, role="assistant").exists() and time.monotonic() < asked_at + 10:
        time.sleep(0.05)
    waited = time.monotonic() - asked_at
    assert waited < 5, f"tenant B's message waited over {waited:.0f} s for the transcriber's rate limit"
    drain()
    # Each note heard once it was asked again after the wait, and answered.
    assert len(model_server.transcriptions) == 2 * slots
    assert sorted(Message.objects.filter(tenant=world.tenant_a, role="user").values_list("content", flat=True)) == [
        "Call mum at six."] * slots
    assert len(platform.sent("sendMessage")) == slots


# --- Groups --------------------------------------------------------------------------------------

BOT = {"id": 111, "is_bot": True, "first_name": "Aria", "username": "aria_bot"}  # 111: its token's number


def group_voice(message_id, **extra):
    return voice_update(message_id=message_id, chat_id=-100777, chat_type="supergroup", **extra)


def test_a_group_voice_note_replying_to_the_bot_is_transcribed_and_answered(client, world, telegram, platform,
                                                                            model_server, drain):
    pair(world, "telegram", "42", world.alice)  # a member: the Qor answers paired people in groups
    with_transcriber(world)
    script_voice(platform)
    model_server.transcripts.append("Can you move dinner to nine?")
    model_server.add(reply("Dinner is at nine now."))
    said = {"message_id": 5, "chat": {"id": -100777, "type": "supergroup"}, "date": 1, "text": "Dinner at 8?",
            "from": BOT}
    post_telegram(client, group_voice(6, reply_to_message=said))
    drain()
    assert model_server.requests[0]["messages"][-1]["content"] == "[telegram] Priya: Can you move dinner to nine?"
    (sent,) = platform.sent("sendMessage")
    assert (sent.json["chat_id"], sent.json["text"]) == ("-100777", "Dinner is at nine now.")


def test_an_unaddressed_group_voice_note_is_kept_with_its_transcript_as_context_and_not_answered(
        client, world, telegram, platform, model_server, drain):
    pair(world, "telegram", "42", world.alice)
    with_transcriber(world)
    script_voice(platform)
    model_server.transcripts.append("I'll bring the dessert.")
    model_server.add(reply("Noted: dessert is covered."))
    post_telegram(client, group_voice(7))
    drain()
    assert model_server.requests == [] and platform.sent("sendMessage") == []
    kept = Message.objects.get(role="user")
    assert (kept.content, kept.metadata["voice"], kept.answer_state) == ("I'll bring the dessert.", "transcript", None)
    post_telegram(client, telegram_update("@aria_bot who brings what?", chat_id=-100777, chat_type="supergroup",
                                          message_id=8, entities=[{"type": "mention", "offset": 0, "length": 9}]))
    drain()
    assert [m["content"] for m in model_server.requests[0]["messages"][1:]] == [
        "[telegram] Priya: I'll bring the dessert.", "[telegram] Priya: @aria_bot who brings what?"]


def test_a_strangers_voice_note_in_a_group_is_neither_fetched_nor_transcribed(client, world, telegram, platform,
                                                                             model_server, drain):
    """Transcribing is a model call: a stranger's voice note in a group (a reply to the bot
    or chatter) was sent to the transcriber at the host's expense, though it is never
    answered; its audio was then still fetched and kept. Neither now: the message is kept
    as the group's context, the note counted as an attachment not kept."""
    with_transcriber(world)
    said = {"message_id": 5, "chat": {"id": -100777, "type": "supergroup"}, "date": 1, "text": "Dinner at 8?",
            "from": BOT}
    post_telegram(client, group_voice(6, reply_to_message=said))
    post_telegram(client, group_voice(7))
    drain()
    assert model_server.transcriptions == [] and model_server.requests == [] and platform.sent("sendMessage") == []
    assert platform.sent(r"/getFile") == [] and platform.sent(r"/file/") == []
    kept = Message.objects.filter(role="user").order_by("seq")
    assert [(m.content, m.metadata["left_out"], "voice" in m.metadata, m.answer_state) for m in kept] == [
        ("", 1, False, None)] * 2
    assert not Image.objects.exists()


def test_a_voice_note_whose_transcription_task_was_lost_is_found_by_the_sweeper_and_answered(world, model_server,
                                                                                            drain):
    """The transcription task lived in the memory of a server that stopped: the note waits
    (other messages are answered meanwhile), then the sweeper transcribes it, once."""
    from channels_app.sweep import sweep
    from qorven.agent.gateway import inbound_accept

    with_transcriber(world)
    note = voice_note_task_lost(world)
    chat = note.session
    model_server.add(reply("Here is the weather."))
    inbound_accept(session=chat, content="and the weather?", channel="web", sender_name="Alice", trust=Trust.OWNER)
    drain()
    assert [m.content for m in Message.objects.filter(role="assistant")] == ["Here is the weather."]
    note.refresh_from_db()
    assert (note.answer_state, note.metadata["voice"]) == ("pending", "pending")  # waiting, passed over

    assert not sweep().voice_notes  # young: its task may still be on its way
    Message.objects.filter(pk=note.pk).update(created_at=timezone.now() - timedelta(hours=1))
    model_server.transcripts.append("Call the plumber tomorrow.")
    model_server.add(reply("I'll remind you."))
    assert sweep().voice_notes == 1
    drain()
    note.refresh_from_db()
    assert (note.content, note.metadata["voice"], note.answer_state) == (
        "Call the plumber tomorrow.", "transcript", "answered")
    assert [m.content for m in Message.objects.filter(role="assistant").order_by("seq")] == [
        "Here is the weather.", "I'll remind you."]
    assert len(model_server.transcriptions) == 1 and sweep().voice_notes == 0


def test_a_transcript_past_any_voice_note_is_cut_not_stored_whole(client, world, telegram, platform, model_server,
                                                                 drain):
    """A transcription server that answered megabytes (a loop, a wrong endpoint) had all
    of it stored as the person's message and sent to the model with every turn after."""
    from qorven.agent.voice import MAX_TRANSCRIPT_CHARS

    pair(world, "telegram", "42", world.alice)
    with_transcriber(world)
    script_voice(platform)
    model_server.transcripts.append("water the orchid " * 20_000)
    model_server.add(reply("Noted."))
    post_telegram(client, voice_update())
    drain()

    message = Message.objects.get(role="user")
    assert len(message.content) == MAX_TRANSCRIPT_CHARS and message.content.endswith("…")
    assert message.content.startswith("water the orchid water the orchid")
    assert platform.sent("sendMessage")[-1].json["text"] == "Noted."
