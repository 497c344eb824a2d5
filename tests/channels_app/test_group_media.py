"""A stranger's photos and files in a group chat: unless the binding answers anyone there,
they are never fetched from the platform nor stored — the message is kept as the group's
context with a note that an attachment was sent and not kept. A paired member's are
fetched as in a private chat."""
from __future__ import annotations

import io

import pytest
from PIL import Image as PILImage

from channels_app.adapters import adapter_for
from channels_app.receive import inbound_receive
from channels_app.services import binding_create
from sessions_app.models import Image, Message

from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from .conftest import pair
from .payloads import post_telegram, telegram_update
from .test_slack_discord_email_sms import (  # noqa: F401 (fixtures)
    DM_CREATE,
    discord,
    discord_key,
    post_slack,
    slack,
    slack_event,
)

pytestmark = pytest.mark.django_db(transaction=True)

GROUP = dict(chat_id=-1009, chat_type="supergroup")
NOT_KEPT = "[an attachment sent with this was not kept: its sender is not paired with this Qor]"


def _jpeg() -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (3, 3), "red").save(out, format="JPEG")
    return out.getvalue()


def _photo(caption: str, file_id: str, **fields) -> dict:
    update = telegram_update("", caption=caption, photo=[
        {"file_id": file_id, "file_unique_id": file_id, "width": 800, "height": 800, "file_size": 5000}], **fields)
    update["message"].pop("text")
    return update


def _document(caption: str, file_id: str, **fields) -> dict:
    update = telegram_update("", caption=caption, document={
        "file_id": file_id, "file_unique_id": file_id, "file_name": "plan.txt", "mime_type": "text/plain",
        "file_size": 20}, **fields)
    update["message"].pop("text")
    return update


def _script_telegram_file(platform, path: str, content: bytes) -> None:
    platform.script(r"/getFile", Canned(body={"ok": True, "result": {"file_id": "x", "file_path": path}}))
    platform.script(rf"/file/bot111:AAA/{path}", Canned(raw=content))


def test_a_strangers_photo_and_document_in_a_telegram_group_are_never_fetched_and_a_members_photo_is(
    client, world, telegram, platform, model_server, drain
):
    """Anyone can make a group and add the bot: a stranger's photo or file there was
    fetched from Telegram and kept, files the host never agreed to take, shown to the
    model later as the group's context."""
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("A red square.")
    post_telegram(client, _photo("look at this", "stranger-photo", user_id=77, first_name="Carol", **GROUP))
    post_telegram(client, _document("", "stranger-doc", user_id=77, first_name="Carol", message_id=2, **GROUP))
    drain()
    assert platform.sent(r"/getFile") == [] and platform.sent(r"/file/") == []
    assert not Image.objects.exists()

    _script_telegram_file(platform, "photos/member.jpg", _jpeg())
    post_telegram(client, _photo("@aria_bot what is this?", "member-photo", message_id=3, **GROUP))
    drain()
    assert len(platform.sent(r"/getFile")) == 1 and len(platform.sent(r"/file/bot111:AAA/photos/member.jpg")) == 1
    (image,) = Image.objects.all()
    assert (image.message.content, image.mime_type) == ("@aria_bot what is this?", "image/jpeg")
    strangers = Message.objects.filter(role="user", sender_name="Carol").order_by("seq")
    assert [(m.content, m.metadata["left_out"], m.metadata.get("no_reply")) for m in strangers] == [
        ("look at this", 1, True), ("", 1, True)]
    (asked,) = model_server.requests
    said = [m["content"] for m in asked["messages"] if m["role"] == "user"]
    assert said[0] == f"[telegram] Carol: look at this {NOT_KEPT}"
    assert said[1].startswith("[telegram] Carol:") and said[1].endswith(NOT_KEPT)
    assert "could not be kept" not in str(said)


def test_a_binding_that_answers_anyone_in_groups_fetches_a_strangers_photo_as_before(client, world, platform,
                                                                                    model_server, drain):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram", group_answers="anyone",
                   credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    _script_telegram_file(platform, "photos/carol.jpg", _jpeg())
    model_server.default = reply("A red square.")
    post_telegram(client, _photo("@aria_bot what is this?", "carol-photo", user_id=77, first_name="Carol", **GROUP))
    drain()
    assert len(platform.sent(r"/file/bot111:AAA/photos/carol.jpg")) == 1
    assert Image.objects.get().message.sender_name == "Carol"
    assert "[image: image/jpeg" in str(model_server.requests[0]["messages"][-1]["content"])


def _slack_file_share(platform, text: str, *, user: str, event_id: str, file_id: str) -> dict:
    event = slack_event(text, channel_type="channel", channel="C0GEN", user=user, event_id=event_id)
    event["event"].update(subtype="file_share", files=[{
        "id": file_id, "name": "photo.jpg", "mimetype": "image/jpeg", "size": 700,
        "url_private_download": f"{platform.url}/slack/files/{file_id}/photo.jpg"}])
    return event


def test_a_strangers_file_in_a_slack_channel_is_never_downloaded_and_a_members_is(
    client, world, slack, platform, model_server, drain  # noqa: F811
):
    pair(world, "slack", "U0PRIYA", world.alice)
    platform.script(r"/slack/files/F2/photo.jpg", Canned(raw=_jpeg()))
    post_slack(client, _slack_file_share(platform, "look", user="U0STRANGER", event_id="Ev1", file_id="F1"))
    drain()
    assert platform.sent(r"/slack/files/") == [] and not Image.objects.exists()
    assert Message.objects.get(role="user").metadata["left_out"] == 1

    post_slack(client, _slack_file_share(platform, "mine", user="U0PRIYA", event_id="Ev2", file_id="F2"))
    drain()
    assert len(platform.sent(r"/slack/files/F2/photo.jpg")) == 1
    assert Image.objects.get().message.content == "mine"


def test_a_strangers_attachment_on_a_discord_server_is_never_downloaded_and_a_members_is(
    world, discord, platform, model_server, drain  # noqa: F811
):
    pair(world, "discord", "80351110224678912", world.alice)
    platform.script(r"/discord/api/v10/attachments/2/plan.pdf", Canned(raw=b"%PDF-1.5\n%%EOF\n"))

    def sent(author: dict, message_id: str, attachment_id: str) -> None:
        event = {**DM_CREATE, "guild_id": "3333", "id": message_id, "content": "", "author": author, "attachments": [
            {"id": attachment_id, "filename": "plan.pdf", "content_type": "application/pdf", "size": 15,
             "url": f"{platform.url}/discord/api/v10/attachments/{attachment_id}/plan.pdf"}]}
        message = adapter_for("discord").from_gateway(discord, event, "9001")
        assert message is not None and message.group
        inbound_receive(binding=discord, message=message)
        drain()

    sent({"id": "555", "username": "mallory"}, "2", "1")
    assert platform.sent(r"/attachments/") == [] and not Image.objects.exists()
    sent(DM_CREATE["author"], "3", "2")
    assert len(platform.sent(r"/attachments/2/plan.pdf")) == 1
    assert Image.objects.get().name == "plan.pdf"
