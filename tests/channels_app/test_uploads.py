"""Images attached on the chat page and the webchat: checked by content and size, stored
with their message in one transaction (or not at all), readable only from their own chat,
and sent to the model as image parts when its route sees images — a note otherwise."""
from __future__ import annotations

import base64
import io
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from PIL import Image as PILImage

from channels_app.services import binding_create
from channels_app.webchat import webchat_token_sign
from sessions_app.models import Image, Message

from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db(transaction=True)

SEND = "/chat/api/acme/aria/messages"


def picture(kind: str = "PNG", size: tuple[int, int] = (8, 6), color: str = "orange") -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", size, color).save(out, format=kind)
    return out.getvalue()


def upload(name: str, data: bytes, content_type: str = "image/png") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type=content_type)


def send(client, content, *files, url=SEND, **headers):
    return client.post(url, {"content": content, "image": list(files)}, **headers)


def last_user_content(request):
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


def test_an_attached_image_is_stored_with_its_message_and_shown_only_in_its_own_chat(client, world, model_server,
                                                                                      drain):
    model_server.add(reply("An orange square."))
    client.force_login(world.alice)
    png = picture()
    response = send(client, "what is this?", upload("photo.png", png))
    assert response.status_code == 201
    event = response.json()["message"]
    assert event["attachments"] == [{"type": "image", "mime_type": "image/png", "size": len(png)}]
    stored = Image.objects.get()
    message = Message.objects.get(role="user")
    assert (stored.message_id, stored.tenant_id, stored.mime_type, stored.size) == (
        message.pk, world.tenant_a.pk, "image/png", len(png))
    assert base64.b64decode(stored.data) == png
    drain()

    url = f"/chat/api/acme/aria/images/{message.session_id}/{message.seq}/0"
    got = client.get(url)
    assert (got.status_code, got["Content-Type"], got.content) == (200, "image/png", png)
    assert got["X-Content-Type-Options"] == "nosniff"
    assert client.get(url[:-1] + "1").status_code == 404  # there is one image
    assert client.get(SEND).json()["messages"][0]["attachments"][0]["mime_type"] == "image/png"
    client.force_login(world.bob)  # same tenant, another person's chat
    assert client.get(url).status_code == 404
    client.force_login(world.charlie)
    assert client.get(url).status_code == 404
    client.logout()
    assert client.get(url).status_code == 401


def test_an_attachment_number_past_what_the_database_counts_is_a_404(client, world, model_server, drain):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                   credentials={"key": "wc_big", "secret": "s3cret", "origins": "https://acme.example"})
    model_server.add(reply("An orange square."))
    client.force_login(world.alice)
    assert send(client, "what is this?", upload("photo.png", picture())).status_code == 201
    message = Message.objects.get(role="user")
    drain()
    token = webchat_token_sign(secret="s3cret", user_id="alice", expires=int(time.time()) + 600)
    for index in (2**53, 2**63, 2**64, 10**30):
        page = client.get(f"/chat/api/acme/aria/images/{message.session_id}/{message.seq}/{index}")
        embed = client.get(f"/webchat/wc_big/images/{message.session_id}/{message.seq}/{index}",
                           HTTP_X_QORVEN_VISITOR=token)
        assert (page.status_code, page.json()) == (404, {"error": "no such image (it may no longer be kept)"})
        assert embed.status_code == 404


def test_a_model_that_sees_images_gets_the_newest_ones_and_notes_for_the_rest(client, world, model_server, drain,
                                                                                settings):
    settings.QORVEN_PROMPT_IMAGES = 1
    world.qor_a.main_vision = True
    world.qor_a.save(update_fields=["main_vision"])
    model_server.add(reply("A red one."), reply("Now a blue one."))
    client.force_login(world.alice)
    red, blue = picture("JPEG", color="red"), picture("PNG", color="blue")
    send(client, "first", upload("red.jpg", red, "image/jpeg"))
    drain()
    send(client, "", upload("blue.png", blue))  # an image alone is a message too
    drain()

    first = last_user_content(model_server.requests[0])
    assert first[0] == {"type": "text", "text": "[web] Alice: first"}
    assert first[1] == {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(red).decode()}}
    second = model_server.requests[1]["messages"]
    older = [m for m in second if m["role"] == "user"][0]["content"]
    assert older == f"[web] Alice: first [image: image/jpeg, {max(1, round(len(red) / 1024))} KB]"
    newest = last_user_content(model_server.requests[1])
    assert newest[1]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(blue).decode()


def test_a_model_that_does_not_see_images_reads_a_note(client, world, model_server, drain):
    model_server.add(reply("I can't see images."))
    client.force_login(world.alice)
    send(client, "look", upload("a.png", picture()))
    drain()
    assert last_user_content(model_server.requests[0]) == "[web] Alice: look [image: image/png, 1 KB]"
    Image.objects.all().delete()  # the images beat emptied the table since
    model_server.add(reply("Still here."))
    send(client, "and now?")
    drain()
    assert [m for m in model_server.requests[1]["messages"] if m["role"] == "user"][0]["content"] == (
        "[web] Alice: look [image: image/png, 1 KB, no longer kept]")


@pytest.mark.parametrize("case", ["not-an-image", "named-as-image", "too-large", "too-many", "unsupported"])
def test_a_refused_upload_says_why_and_stores_nothing(client, world, settings, case):
    settings.QORVEN_MAX_UPLOAD = 2000
    files, status, says = {
        "not-an-image": ([upload("backup.zip", b"PK\x03\x04\x14\x00\x00\x00binary\x00", "application/zip")], 415,
                         "not an image"),
        "named-as-image": ([upload("photo.png", b"\x00\x01\x02\x03 binary, pretending")], 415, "not an image"),
        "too-large": ([upload("big.png", picture(size=(400, 400), color="white") + b"\0" * 3000)], 413,
                      "larger than"),
        "too-many": ([upload(f"{i}.png", picture()) for i in range(5)], 400, "at most 4"),
        "unsupported": ([upload("old.bmp", picture("BMP"), "image/bmp")], 415, "BMP"),
    }[case]
    client.force_login(world.alice)
    response = send(client, "see attached", *files)
    assert response.status_code == status and says in response.json()["error"]
    assert not Message.objects.exists() and not Image.objects.exists()


def test_a_webchat_visitor_attaches_an_image_and_only_their_token_reads_it(client, world, model_server, drain):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                   credentials={"key": "wc_up", "secret": "s3cret", "origins": "https://acme.example"})
    model_server.add(reply("Nice."))
    token = webchat_token_sign(secret="s3cret", user_id="alice", expires=int(time.time()) + 600)
    gif = picture("GIF")
    response = send(client, "from the site", upload("x.gif", gif, "image/gif"), url="/webchat/wc_up/messages",
                    HTTP_X_QORVEN_VISITOR=token)
    assert response.status_code == 201
    message = Message.objects.get(role="user")
    url = f"/webchat/wc_up/images/{message.session_id}/{message.seq}/0"
    assert client.get(url, HTTP_X_QORVEN_VISITOR=token).content == gif
    bob = webchat_token_sign(secret="s3cret", user_id="bob", expires=int(time.time()) + 600)
    assert client.get(url, HTTP_X_QORVEN_VISITOR=bob).status_code == 404
    assert client.get(url).status_code == 404
    drain()


def test_a_pdf_and_a_text_file_are_kept_by_name_downloaded_and_noted_for_the_model(client, world, model_server,
                                                                                    drain):
    model_server.add(reply("Got both files."))
    client.force_login(world.alice)
    pdf = b"%PDF-1.7\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
    notes = "Shopping: eggs, flour, café au lait\n".encode()
    response = send(client, "see attached", upload("../../report.pdf", pdf, "application/octet-stream"),
                    upload("notes.txt", notes, "text/plain"))
    assert response.status_code == 201
    assert response.json()["message"]["attachments"] == [
        {"type": "file", "mime_type": "application/pdf", "size": len(pdf), "name": "report.pdf"},
        {"type": "file", "mime_type": "text/plain", "size": len(notes), "name": "notes.txt"},
    ]
    drain()
    assert last_user_content(model_server.requests[0]) == (
        "[web] Alice: see attached [file: report.pdf, application/pdf, 1 KB; could not be read] "
        "[file: notes.txt, text/plain, 1 KB]\n"
        "Shopping: eggs, flour, café au lait\n\n[end of notes.txt]")
    message = Message.objects.get(role="user")
    got = client.get(f"/chat/api/acme/aria/images/{message.session_id}/{message.seq}/0")
    assert (got.content, got["Content-Type"]) == (pdf, "application/pdf")
    assert got["Content-Disposition"] == 'attachment; filename="report.pdf"'  # downloaded, not shown on our origin


def test_text_files_are_read_into_the_prompt_newest_first_within_the_budget(client, world, model_server, drain,
                                                                              settings):
    settings.QORVEN_PROMPT_FILE_CHARS = 30
    model_server.add(reply("Noted."), reply("Noted too."), reply("And that."))
    client.force_login(world.alice)
    send(client, "old list", upload("old.txt", b"apples pears plums", "text/plain"))
    drain()
    send(client, "new list", upload("new.txt", ("x" * 25).encode(), "text/plain"))
    drain()
    users = [m["content"] for m in model_server.requests[1]["messages"] if m["role"] == "user"]
    assert users == [
        "[web] Alice: old list [file: old.txt, text/plain, 1 KB]\napple\n[… truncated]\n[end of old.txt]",
        "[web] Alice: new list [file: new.txt, text/plain, 1 KB]\n" + "x" * 25 + "\n[end of new.txt]",
    ]
    Image.objects.filter(name="new.txt").delete()  # no longer kept: its note only
    send(client, "and?")
    drain()
    users = [m["content"] for m in model_server.requests[2]["messages"] if m["role"] == "user"]
    assert users[1] == "[web] Alice: new list [file: new.txt, text/plain, 1 KB]"
    assert users[0].startswith("[web] Alice: old list [file: old.txt, text/plain, 1 KB]\napples pears plums\n")
