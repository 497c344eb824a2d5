"""Slack, Discord, email and SMS: real payload formats, real signatures, fake APIs."""
from __future__ import annotations

import base64
import io
import json
import logging
import time
import zlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.core import mail

from channels_app.adapters import adapter_for
from channels_app.adapters.base import hmac_hex
from channels_app.models import InboundEvent, PairingRequest
from channels_app.receive import inbound_receive
from channels_app.services import binding_create
from sessions_app.models import Message, Session

from ..fakes.model_server import reply
from ..pdf_files import pdf
from .conftest import pair
from .payloads import email_body, post_email, post_sms

pytestmark = pytest.mark.django_db(transaction=True)


# --- Slack ---------------------------------------------------------------------------------

@pytest.fixture
def slack(world):
    return binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="slack", credentials={
        "app_id": "A0APP", "bot_token": "xoxb-1", "signing_secret": "slack-signing", "bot_user_id": "UBOT"})


def post_slack(client, body, secret="slack-signing", stamp=None, **headers):
    raw = json.dumps(body).encode()
    stamp = str(int(time.time())) if stamp is None else stamp
    sig = "v0=" + hmac_hex(secret, b"v0:" + stamp.encode() + b":" + raw)
    return client.post("/v1/webhooks/slack", data=raw, content_type="application/json",
                       HTTP_X_SLACK_SIGNATURE=sig, HTTP_X_SLACK_REQUEST_TIMESTAMP=stamp, **headers)


def slack_event(text, *, channel_type="im", channel="D0DM", user="U0PRIYA", event_id="Ev01", kind="message",
                ts=None):
    """`ts` names the message in its channel: one per event id unless given (the message
    event and the app_mention of one mention share theirs)."""
    ts = ts or f"{1712345678 + zlib.crc32(event_id.encode()) % 100000}.000100"
    return {
        "token": "legacy", "team_id": "T0TEAM", "api_app_id": "A0APP", "type": "event_callback",
        "event_id": event_id, "event_time": int(time.time()),
        "event": {"type": kind, "channel": channel, "user": user, "text": text, "ts": ts,
                  "channel_type": channel_type, "event_ts": ts},
    }


def test_slack_url_verification_is_answered_after_the_signature_check(client, world, slack):
    body = {"token": "x", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"}
    ok = post_slack(client, body)
    assert ok.status_code == 200 and ok.json() == {"challenge": body["challenge"]}
    assert post_slack(client, body, secret="wrong").status_code == 401


@pytest.mark.parametrize("event", ["a message", 5, ["message"],
                                   {"type": "message", "channel_type": "im", "user": "U0PRIYA", "text": "hi",
                                    "ts": "1.1", "files": [{"id": "F1", "size": "large"}]}])
def test_a_well_signed_slack_event_of_an_unknown_shape_is_ignored_with_200(client, world, slack, caplog, event):
    body = {**slack_event("hi"), "event": event}
    with caplog.at_level(logging.ERROR):
        assert post_slack(client, body).json() == {"ok": True}  # Slack stops sending it again
    assert not InboundEvent.objects.exists() and not Message.objects.exists()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_slack_request_naming_no_app_is_refused_before_any_secret_is_tried_but_slacks_url_check(
    client, world, slack
):
    """A request naming no app (api_app_id) was checked against the signing secret of every
    Slack binding on the server, its whole body hashed with each: anyone could make the
    server hash a megabyte once per workspace's Slack app, for every request they sent.
    Only Slack's URL check, a body of a few dozen bytes, names no app: it alone is checked
    against the bindings' secrets, and anything else naming none is refused unread, even
    signed with a secret that would pass."""
    event = {"type": "event_callback", "event": {"type": "message", "user": "U0PRIYA", "text": "hi"}}
    assert post_slack(client, event).status_code == 401  # signed with the binding's own secret
    assert post_slack(client, {"type": "url_verification", "challenge": "c", "padding": "x" * 2000}).status_code == 401
    body = {"token": "x", "challenge": "c", "type": "url_verification"}  # the URL check, still answered
    assert post_slack(client, body).json() == {"challenge": "c"}
    assert InboundEvent.objects.count() == 0


def test_slack_dm_gets_a_reply_via_chat_post_message(client, world, slack, platform, model_server, drain):
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.add(reply("Hi from Slack"))
    assert post_slack(client, slack_event("hello")).status_code == 200
    drain()
    (sent,) = platform.sent(r"/slack/api/chat.postMessage")
    assert sent.json == {"channel": "D0DM", "text": "Hi from Slack"}
    assert sent.headers["Authorization"] == "Bearer xoxb-1"
    assert Message.objects.get(role="user").channel == "slack_dm"


def test_slack_dm_search_quotes_a_code_block_and_a_mention_without_slack_reading_them(client, world, slack, platform,
                                                                                      model_server, drain):
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.add(reply("Run this:\n```\nmake deploy\n```\nthen tell <!channel> it is *done*."))
    post_slack(client, slack_event("how do I deploy?", event_id="Ev40"))
    drain()
    post_slack(client, slack_event("/search deploy", event_id="Ev41"))
    drain()
    text = platform.sent(r"/slack/api/chat.postMessage")[-1].json["text"]
    lines = text.splitlines()
    assert lines[0] == "Found in our conversation, newest first (“deploy”):"
    assert lines[1].endswith(" · Slack · Aria — Run this: ˋˋˋ make deploy ˋˋˋ then tell ‹!channel› it is ∗done∗.")
    assert lines[2].endswith(" · Slack · you — how do I deploy?")
    assert len(lines) == 3 and not any(c in text for c in "`*<>")
    assert len(model_server.requests) == 1



def test_slack_dm_history_quotes_a_code_block_a_mention_and_a_link_without_slack_reading_them(
    client, world, slack, platform, model_server, drain
):
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.add(reply("Run this:\n```\nmake deploy\n\nthen tell <!channel> it is *done*, ~maybe~ <https://evil.example|here>"))
    post_slack(client, slack_event("how do I deploy?\n> quoted _twice_", event_id="Ev42"))
    drain()
    post_slack(client, slack_event("/history", event_id="Ev43"))
    drain()
    text = platform.sent(r"/slack/api/chat.postMessage")[-1].json["text"]
    lines = text.splitlines()
    assert len(lines) == 2
    assert lines[0].endswith(": how do I deploy? › quoted ˍtwiceˍ")
    assert lines[1].endswith(": Run this: ˋˋˋ make deploy then tell ‹!channel› it is ∗done∗, ∼maybe∼ ‹https://evil.example"
                             "ǀhere›")
    assert not any(c in text for c in "`*_~|<>") and "&lt;" not in text
    assert len(model_server.requests) == 1


def test_a_slack_senders_name_is_looked_up_once_and_reaches_the_prompt(client, world, slack, platform, model_server,
                                                                        drain):
    from ..fakes.platform_server import Canned

    identity = pair(world, "slack", "U0PRIYA", world.alice)
    identity.display_name = ""
    identity.save(update_fields=["display_name"])
    platform.default(r"/slack/api/users.info", Canned(body={
        "ok": True, "user": {"id": "U0PRIYA", "name": "priya", "real_name": "Priya Raman",
                             "profile": {"display_name": "", "real_name": "Priya Raman"}}}))
    model_server.add(reply("Hi Priya"), reply("Still here"))
    post_slack(client, slack_event("hello", event_id="Ev10"))
    drain()
    post_slack(client, slack_event("again", event_id="Ev11"))
    drain()
    assert model_server.requests[0]["messages"][-1]["content"] == "[slack_dm] Priya Raman: hello"
    assert Message.objects.filter(role="user").first().sender_name == "Priya Raman"
    (looked_up,) = platform.sent(r"/slack/api/users.info")  # once: the name is cached
    assert "user=U0PRIYA" in looked_up.path and looked_up.headers["Authorization"] == "Bearer xoxb-1"


def test_a_suspended_workspace_asks_slack_no_senders_name_and_asks_again_once_resumed(
        client, world, slack, platform, model_server, drain):
    """A message to a suspended workspace is kept unanswered with nothing asked of Slack:
    not even users.info for a name with its bot token. Resumed, the next message's sender
    is looked up as before; what was kept meanwhile keeps the name it was stored with."""
    from tenancy.services import tenant_resume, tenant_suspend

    from ..fakes.platform_server import Canned

    pair(world, "slack", "U0PRIYA", world.alice)
    platform.default(r"/slack/api/users.info", Canned(body={
        "ok": True, "user": {"id": "U0PRIYA", "name": "priya", "real_name": "Priya Raman",
                             "profile": {"display_name": "", "real_name": "Priya Raman"}}}))
    tenant_suspend(tenant=world.tenant_a)
    post_slack(client, slack_event("kept in the dm", event_id="Ev50"))
    post_slack(client, slack_event("kept in the channel", channel_type="channel", channel="C0GEN", event_id="Ev51"))
    drain()
    assert platform.requests == [] and model_server.requests == []
    kept = dict(Message.objects.filter(session__tenant=world.tenant_a).values_list("content", "sender_name"))
    assert kept == {"kept in the dm": "Alice", "kept in the channel": ""}  # the paired person's name; none known

    tenant_resume(tenant=world.tenant_a)
    model_server.add(reply("Hi Priya"))
    post_slack(client, slack_event("back again", event_id="Ev52"))
    drain()
    (looked_up,) = platform.sent(r"/slack/api/users.info")
    assert "user=U0PRIYA" in looked_up.path
    assert Message.objects.get(content="back again").sender_name == "Priya Raman"
    assert Message.objects.get(content="kept in the dm").sender_name == "Alice"
    assert model_server.requests[0]["messages"][-1]["content"] == "[slack_dm] Priya Raman: back again"


def test_a_slack_message_is_answered_when_its_senders_name_cannot_be_had(client, world, slack, platform,
                                                                          model_server, drain):
    from ..fakes.platform_server import Canned

    pair(world, "slack", "U0PRIYA", world.alice)
    platform.default(r"/slack/api/users.info", Canned(status=500, body={"ok": False}))
    model_server.add(reply("Hi"))
    post_slack(client, slack_event("hello", event_id="Ev12"))
    drain()
    assert len(platform.sent(r"chat.postMessage")) == 1


def test_a_slack_file_share_is_fetched_with_the_bot_token_and_answered(client, world, slack, platform, model_server,
                                                                        drain):
    import io

    from PIL import Image as PILImage

    from sessions_app.models import Image

    from ..fakes.platform_server import Canned

    pair(world, "slack", "U0PRIYA", world.alice)
    jpeg = io.BytesIO()
    PILImage.new("RGB", (3, 3), "red").save(jpeg, format="JPEG")
    platform.script(r"/slack/files/F1/photo.jpg", Canned(raw=jpeg.getvalue()))
    model_server.add(reply("A red square."))
    event = slack_event("what is this?", event_id="Ev30")
    event["event"].update(subtype="file_share", files=[{
        "id": "F1", "name": "photo.jpg", "mimetype": "image/jpeg", "size": len(jpeg.getvalue()),
        "url_private_download": f"{platform.url}/slack/files/F1/photo.jpg"}])
    assert post_slack(client, event).status_code == 200
    drain()
    (fetched,) = platform.sent(r"/slack/files/F1/photo.jpg")
    assert fetched.headers["Authorization"] == "Bearer xoxb-1"
    assert Image.objects.get().mime_type == "image/jpeg"
    assert model_server.requests[0]["messages"][-1]["content"] == "[slack_dm] Alice: what is this? [image: image/jpeg, 1 KB]"

@pytest.mark.parametrize("case", ["missing", "bad", "stale"])
def test_slack_bad_missing_or_stale_signatures_are_rejected(client, world, slack, platform, case):
    if case == "missing":
        response = client.post("/v1/webhooks/slack", data=json.dumps(slack_event("x")), content_type="application/json")
    elif case == "bad":
        response = post_slack(client, slack_event("x"), secret="not-it")
    else:
        response = post_slack(client, slack_event("x"), stamp=str(int(time.time()) - 600))
    assert response.status_code == 401
    assert not InboundEvent.objects.exists()


def test_slack_retries_are_answered_once(client, world, slack, platform, model_server, drain):
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.default = reply("once")
    post_slack(client, slack_event("hello", event_id="EvSAME"))
    post_slack(client, slack_event("hello", event_id="EvSAME"), HTTP_X_SLACK_RETRY_NUM="1",
               HTTP_X_SLACK_RETRY_REASON="http_timeout")
    drain()
    assert Message.objects.filter(role="user").count() == 1
    assert len(platform.sent("chat.postMessage")) == 1


def test_slack_channel_messages_are_a_group_answered_only_on_mention(client, world, slack, platform, model_server, drain):
    pair(world, "slack", "U0PRIYA", world.alice)  # a member: the Qor answers paired people in groups
    model_server.default = reply("On it.")
    post_slack(client, slack_event("lunch?", channel_type="channel", channel="C0GEN", event_id="Ev1"))
    post_slack(client, slack_event("<@UBOT> book a table", channel_type="channel", channel="C0GEN",
                                   event_id="Ev2", kind="app_mention", ts="1712345602.000100"))
    post_slack(client, slack_event("<@UBOT> book a table", channel_type="channel", channel="C0GEN", event_id="Ev3",
                                   ts="1712345602.000100"))
    drain()
    session = Session.objects.get()
    assert (session.kind, session.channel, session.external_thread_id) == ("group", "slack", "C0GEN")
    assert [m.content for m in Message.objects.filter(role="user").order_by("seq")] == ["lunch?", "<@UBOT> book a table"]
    assert len(model_server.requests) == 1
    assert platform.sent("chat.postMessage")[0].json["channel"] == "C0GEN"


@pytest.mark.parametrize("first", ["message", "app_mention"])
def test_without_the_bot_user_id_a_mention_is_stored_and_answered_once(
    client, world, platform, model_server, drain, first
):
    """Slack sends a mention in a channel twice: as a message event and as an app_mention.
    A binding saved without the bot's user id (it is optional) could not tell the message
    event named its bot, and kept both: the question twice in the group's context. Every
    event says which bot it was delivered to (`authorizations`)."""
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="slack", credentials={
        "app_id": "A0APP", "bot_token": "xoxb-1", "signing_secret": "slack-signing"})
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.default = reply("On it.")
    events = {kind: slack_event("<@UBOT> book a table", channel_type="channel", channel="C0GEN", kind=kind,
                                event_id=f"Ev-{kind}", ts="1712345602.000100") for kind in ("message", "app_mention")}
    for event in events.values():
        event["authorizations"] = [{"enterprise_id": None, "team_id": "T0TEAM", "user_id": "UBOT", "is_bot": True,
                                    "is_enterprise_install": False}]
    post_slack(client, events[first])
    post_slack(client, events["app_mention" if first == "message" else "message"])
    drain()
    assert [m.content for m in Message.objects.filter(role="user")] == ["<@UBOT> book a table"]
    assert len(model_server.requests) == 1
    assert [s.json["text"] for s in platform.sent("chat.postMessage")] == ["On it."]


def test_a_slack_reply_escapes_what_slack_would_read_as_markup(client, world, slack, platform, model_server, drain):
    """Slack reads <!channel>, <!here> and <@U…> in a message's text as mentions (a text
    the model was led to write would ping a whole channel), and a bare < as a link."""
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.add(reply("<!channel> if a<b & b>c"))
    post_slack(client, slack_event("hello"))
    drain()
    (sent,) = platform.sent("chat.postMessage")
    assert sent.json["text"] == "&lt;!channel&gt; if a&lt;b &amp; b&gt;c"


def test_a_question_asked_in_a_slack_thread_is_answered_in_that_thread(client, world, slack, platform, model_server,
                                                                       drain):
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.default = reply("On it.")
    event = slack_event("<@UBOT> help", channel_type="channel", channel="C0GEN", event_id="EvT1", kind="app_mention")
    event["event"]["thread_ts"] = "1712345600.000001"
    post_slack(client, event)
    drain()
    (sent,) = platform.sent("chat.postMessage")
    assert sent.json == {"channel": "C0GEN", "text": "On it.", "thread_ts": "1712345600.000001"}


# --- Discord -------------------------------------------------------------------------------

@pytest.fixture
def discord_key():
    return Ed25519PrivateKey.generate()


@pytest.fixture
def discord(world, discord_key):
    public = discord_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
    return binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="discord", credentials={
        "application_id": "9001", "public_key": public, "bot_token": "discord-bot-token"})


def post_discord(client, body, key):
    raw = json.dumps(body).encode()
    stamp = str(int(time.time()))
    sig = key.sign(stamp.encode() + raw).hex()
    return client.post("/v1/webhooks/discord", data=raw, content_type="application/json",
                       HTTP_X_SIGNATURE_ED25519=sig, HTTP_X_SIGNATURE_TIMESTAMP=stamp)


def test_discord_ping_is_answered_with_pong_and_bad_signatures_refused(client, world, discord, discord_key):
    ping = {"id": "1", "application_id": "9001", "type": 1, "token": "t", "version": 1}
    assert post_discord(client, ping, discord_key).json() == {"type": 1}
    assert post_discord(client, ping, Ed25519PrivateKey.generate()).status_code == 401


def test_discord_ask_command_is_deferred_then_answered_by_followup(
    client, world, discord, discord_key, platform, model_server, drain
):
    pair(world, "discord", "80351110224678912", world.alice)
    model_server.add(reply("42, obviously."))
    body = {
        "id": "1234567890", "application_id": "9001", "type": 2, "token": "interaction-token", "version": 1,
        "channel_id": "555", "user": {"id": "80351110224678912", "username": "priya", "global_name": "Priya"},
        "data": {"id": "77", "name": "ask", "type": 1,
                 "options": [{"name": "question", "type": 3, "value": "meaning of life?"}]},
    }
    response = post_discord(client, body, discord_key)
    assert response.json() == {"type": 5}
    assert post_discord(client, body, discord_key).json() == {"type": 5}  # a redelivery
    drain()
    (sent,) = platform.sent(r"/discord/api/v10/webhooks/9001/interaction-token")
    assert sent.json == {"content": "42, obviously.", "allowed_mentions": {"parse": []}}
    assert Message.objects.get(role="user").channel == "discord_dm"
    # The interaction's token answers that interaction only (it lapses in 15 minutes): it is
    # not where the person's later messages (a reminder, a heartbeat's) go.
    from channels_app.models import Identity

    assert not Identity.objects.get(channel="discord").reply_target.startswith("followup:")


DM_CREATE = {
    "type": 0, "tts": False, "timestamp": "2026-11-30T10:00:00.000000+00:00", "pinned": False,
    "mentions": [], "mention_roles": [], "mention_everyone": False, "id": "1111111111111111111",
    "flags": 0, "embeds": [], "edited_timestamp": None, "content": "hello from discord",
    "components": [], "channel_id": "2222222222222222222", "attachments": [],
    "author": {"username": "priya", "public_flags": 0, "id": "80351110224678912", "global_name": "Priya",
               "discriminator": "0", "avatar": None},
}


def test_gateway_message_create_dm_is_answered_in_the_dm_channel(world, discord, platform, model_server, drain):
    pair(world, "discord", "80351110224678912", world.alice)
    model_server.add(reply("Hi Priya"))
    message = adapter_for("discord").from_gateway(discord, DM_CREATE, bot_user_id="9001")
    assert (message.channel, message.group, message.addressed) == ("discord_dm", False, True)
    inbound_receive(binding=discord, message=message)
    drain()
    (sent,) = platform.sent(r"/discord/api/v10/channels/2222222222222222222/messages")
    assert sent.json == {"content": "Hi Priya", "allowed_mentions": {"parse": []}}
    assert sent.headers["Authorization"] == "Bot discord-bot-token"


def test_gateway_guild_messages_are_answered_only_when_the_bot_is_mentioned(world, discord):
    adapter = adapter_for("discord")
    plain = {**DM_CREATE, "guild_id": "3333", "content": "anyone here?"}
    mention = {**DM_CREATE, "guild_id": "3333", "id": "2", "content": "<@9001> help",
               "mentions": [{"id": "9001", "username": "aria", "bot": True}]}
    from_bot = {**DM_CREATE, "author": {"id": "9001", "username": "aria", "bot": True}}
    assert adapter.from_gateway(discord, plain, "9001").addressed is False
    assert adapter.from_gateway(discord, mention, "9001").addressed is True
    assert adapter.from_gateway(discord, mention, "9001").channel == "discord"
    assert adapter.from_gateway(discord, from_bot, "9001") is None


def test_a_discord_attachment_is_fetched_from_the_cdn_and_a_url_elsewhere_is_not(world, discord, platform,
                                                                                  model_server, drain):
    from sessions_app.models import Image

    from ..fakes.platform_server import Canned

    pair(world, "discord", "80351110224678912", world.alice)
    platform.script(r"/discord/api/v10/attachments/1/plan.pdf", Canned(raw=b"%PDF-1.5\n%%EOF\n"))
    model_server.add(reply("Read it."))
    event = {**DM_CREATE, "content": "", "attachments": [
        {"id": "1", "filename": "plan.pdf", "content_type": "application/pdf", "size": 15,
         "url": f"{platform.url}/discord/api/v10/attachments/1/plan.pdf"},
        {"id": "2", "filename": "x.pdf", "size": 15, "url": "http://10.0.0.5/x.pdf"},
    ]}
    inbound_receive(binding=discord, message=adapter_for("discord").from_gateway(discord, event, "9001"))
    drain()
    assert list(Image.objects.values_list("mime_type", "name")) == [("application/pdf", "plan.pdf")]
    assert model_server.requests[0]["messages"][-1]["content"] == (
        "[discord_dm] Priya: [file: plan.pdf, application/pdf, 1 KB; could not be read] "
        "[an attachment sent with this could not be"
        " kept: too large, unreachable, or not an image, a PDF, a text file or audio]")  # the one at 10.0.0.5
    assert "Authorization" not in platform.sent(r"/attachments/1/plan.pdf")[0].headers  # no token to a CDN


def test_discord_replies_are_split_at_2000_characters(world, discord, platform, model_server, drain):
    pair(world, "discord", "80351110224678912", world.alice)
    model_server.add(reply("word " * 900))
    inbound_receive(binding=discord, message=adapter_for("discord").from_gateway(discord, DM_CREATE, "9001"))
    drain()
    parts = [r.json["content"] for r in platform.sent("/messages")]
    assert len(parts) == 3 and all(len(p) <= 2000 for p in parts)


def test_a_discord_reply_mentions_nobody_the_model_names(world, discord, platform, model_server, drain):
    """Without allowed_mentions Discord parses @everyone, @here, users and roles in a
    message's content: a reply the model was led to write would ping a whole server."""
    pair(world, "discord", "80351110224678912", world.alice)
    model_server.add(reply("@everyone look at this"))
    inbound_receive(binding=discord, message=adapter_for("discord").from_gateway(discord, DM_CREATE, bot_user_id="9001"))
    drain()
    (sent,) = platform.sent(r"/channels/2222222222222222222/messages")
    assert sent.json == {"content": "@everyone look at this", "allowed_mentions": {"parse": []}}


def test_pairing_on_telegram_does_not_admit_the_same_id_on_discord(client, world, discord, platform, model_server, drain):
    from channels_app.models import Identity

    pair(world, "telegram", "80351110224678912", world.alice)
    inbound_receive(binding=discord, message=adapter_for("discord").from_gateway(discord, DM_CREATE, "9001"))
    drain()
    assert model_server.requests == []
    assert PairingRequest.objects.get().channel == "discord"
    assert Identity.objects.get(channel="discord").approval == "pending"


# --- Email ---------------------------------------------------------------------------------

def test_email_threads_are_their_own_sessions_and_replies_go_by_smtp(client, world, email, model_server, drain):
    pair(world, "email", "priya@example.com", world.alice)
    model_server.default = reply("Sounds good.")
    post_email(client, email_body("Can we go in May?", "<m1@example.com>"))
    post_email(client, email_body("Or June?", "<m2@example.com>", in_reply_to="<m1@example.com>"))
    post_email(client, email_body("Different topic", "<m3@example.com>"))
    drain()
    sessions = Session.objects.filter(kind="email")
    assert sorted(s.external_thread_id for s in sessions) == ["<m1@example.com>", "<m3@example.com>"]
    assert len(mail.outbox) == 3
    # Threads are answered side by side, so replies to different threads leave in any order.
    (first,) = [m for m in mail.outbox if m.extra_headers["In-Reply-To"] == "<m1@example.com>"]
    assert first.to == ["priya@example.com"] and first.subject == "Re: Trip plans"
    assert post_email(client, email_body("x", "<m9@example.com>"), secret="wrong").status_code == 401


def test_an_email_webhook_does_not_say_which_addresses_are_bound(client, world, email):
    """A wrong secret and an address nobody bound are answered alike, so the answers do
    not tell a prober which addresses this server takes mail for."""
    bound = post_email(client, email_body("x", "<p1@example.com>"), secret="guess")
    unbound = post_email(client, {**email_body("x", "<p2@example.com>"), "to": "nobody@acme.example"},
                         secret="guess")
    assert (bound.status_code, bound.json()) == (unbound.status_code, unbound.json())
    assert bound.status_code == 401
    assert not InboundEvent.objects.exists()


def test_an_email_webhook_refused_logs_the_addresses_it_named_on_one_line(client, world, email, caplog):
    """Anyone may post to the email webhook, with any secret: the addresses its To names
    are logged with the refusal. A line break or a terminal escape in one (an address
    literal, "a@[…]", takes them) wrote a line of its own into the log, a forged one."""
    forged = "a@[1.2.3.4\n2026-12-07 09:00:00,000 ERROR qorven forged line]"
    with caplog.at_level(logging.INFO, logger="channels_app.webhooks"):
        for to in (forged, "b@c\x1b[2Jd.example"):
            response = post_email(client, {**email_body("x", "<p3@example.com>"), "to": to}, secret="guess")
            assert response.status_code == 401
    lines = [r.getMessage() for r in caplog.records if r.name == "channels_app.webhooks"]
    assert len(lines) == 2
    assert all("\n" not in line and "\x1b" not in line for line in lines)
    assert "1.2.3.4\\n2026-12-07" in lines[0] and "\\x1b[2j" in lines[1]  # addresses are read lower case


def test_a_member_replying_in_another_members_email_thread_is_answered_in_a_session_of_his_own(
    client, world, email, model_server, drain
):
    """Bob names Alice's thread (In-Reply-To): his message opens his own thread session;
    his turn sees neither her mail nor her memories, and only he gets its answer."""
    from memory_app.services import memory_add

    pair(world, "email", "alice@acme.example", world.alice)
    pair(world, "email", "bob@acme.example", world.bob)
    memory_add(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, type="fact", content="Alice's door code is 7391")
    model_server.default = reply("Noted.")
    mine = {"to": "aria@acme.example", "subject": "Plans"}
    post_email(client, {**mine, "from": "Alice <alice@acme.example>", "text": "My salary review is next week",
                        "message_id": "<a1@acme.example>"})
    drain()
    post_email(client, {**mine, "from": "Bob <bob@acme.example>", "text": "What is the door code? Summarise this thread",
                        "message_id": "<b1@acme.example>", "in_reply_to": "<a1@acme.example>"})
    drain()
    hers, his = (Session.objects.get(kind="email", user=user) for user in (world.alice, world.bob))
    (her_mail,) = Message.objects.filter(session=hers, role="user")
    (his_mail,) = Message.objects.filter(session=his, role="user")
    assert "My salary review" in her_mail.content and "door code" in his_mail.content
    bobs_prompt = json.dumps(model_server.requests[-1])
    assert "salary review" not in bobs_prompt and "7391" not in bobs_prompt
    assert sorted(m.to[0] for m in mail.outbox) == ["alice@acme.example", "bob@acme.example"]


def test_an_email_to_several_addresses_reaches_the_binding_among_them(client, world, email, model_server, drain):
    pair(world, "email", "priya@example.com", world.alice)
    model_server.default = reply("Sure.")
    body = {**email_body("Can we meet?", "<m1@example.com>"), "to": "Bob <bob@example.com>, Aria <aria@acme.example>"}
    assert post_email(client, body).status_code == 200
    drain()
    assert Message.objects.filter(role="assistant", content="Sure.").exists()


def test_an_email_to_two_workspaces_reaches_each_with_its_own_secret(client, world, email):
    """One email To acme's address and Cc globex's: each workspace's mail service posts it
    with its own secret, and each is taken, in its own workspace. The binding was the one
    of the first address bound, so globex's post, checked against acme's secret, was
    refused and its copy never arrived."""
    binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="email",
                   credentials={"address": "aria@globex.example", "secret": "globex-secret"})
    body = {**email_body("Both of you?", "<two@example.com>"), "cc": "Aria <aria@globex.example>"}
    assert post_email(client, body, secret="globex-secret").status_code == 200
    assert post_email(client, body).status_code == 200
    assert sorted(InboundEvent.objects.values_list("tenant__slug", flat=True)) == ["acme", "globex"]
    assert post_email(client, {**body, "message_id": "<three@example.com>"}, secret="guess").status_code == 401


def test_an_email_naming_thousands_of_addresses_is_looked_up_in_a_few_queries(
        client, world, email, django_assert_max_num_queries):
    """Each address of To and Cc that no binding has was a query of its own, made before
    the secret was checked: one post of a megabyte of addresses made the server read the
    database tens of thousands of times."""
    many = ", ".join(f"p{n}@example.com" for n in range(20_000))
    with django_assert_max_num_queries(5):
        refused = post_email(client, {**email_body("x", "<many@example.com>"), "to": many}, secret="guess")
    assert refused.status_code == 401


def test_an_email_reply_carries_the_threads_references_and_a_one_line_subject(client, world, email, model_server,
                                                                             drain):
    pair(world, "email", "priya@example.com", world.alice)
    model_server.default = reply("Yes.")
    body = {**email_body("And June?", "<m3@example.com>", in_reply_to="<m2@example.com>"),
            "references": "<m1@example.com> <m2@example.com>", "subject": "Trip\r\n plans"}
    post_email(client, body)
    drain()
    (sent,) = mail.outbox
    assert sent.extra_headers["References"] == "<m1@example.com> <m2@example.com> <m3@example.com>"
    assert sent.extra_headers["In-Reply-To"] == "<m3@example.com>" and sent.subject == "Re: Trip plans"


def test_an_smtp_refusal_for_good_fails_the_reply_at_once(world, email, settings):
    """A 5xx SMTP reply (RFC 5321: permanent) from a real SMTP conversation, and a subject
    that cannot be a header: retrying cannot help, so the part fails at once."""
    from channels_app.adapters.base import SendError

    from ..fakes.smtp_server import smtp_server

    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    with smtp_server(RCPT=b"550 5.1.1 no such user\r\n") as port:  # a server that knows no such user
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
        adapter = adapter_for("email")
        with pytest.raises(SendError) as refused:
            adapter.send(email, "\x1f".join(["nobody@example.com", "<m1@example.com>", "Re: Trip plans"]), "Sure.")
        assert refused.value.permanent and "550" in str(refused.value)
        with pytest.raises(SendError) as unwritable:
            adapter.send(email, "\x1f".join(["priya@example.com", "<m1@example.com>", "Re: Trip\nBcc: x@example.com"]),
                         "Sure.")
        assert unwritable.value.permanent


def test_without_a_mail_server_the_default_sends_nothing_and_prints_nothing():
    """With no EMAIL_URL, mail went to the console backend: every email reply (its
    recipient, subject and text quoting the person) was printed to the server's output,
    outside the log, and counted as sent. Now nothing is sent or printed."""
    import os
    import subprocess
    import sys

    code = ("import django; django.setup()\n"
            "from django.conf import settings; print('backend', settings.EMAIL_BACKEND)\n"
            "from django.core.mail import EmailMessage\n"
            "print('sent', EmailMessage('Re: my therapy', 'my therapy notes', to=['priya@example.com'])"
            ".send(fail_silently=True))\n")
    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "EMAIL_URL")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**environment, "DJANGO_SETTINGS_MODULE": "qorven.settings",
                               "DJANGO_SECRET_KEY": "mail-test"})
    assert done.returncode == 0, done.stderr[-2000:]
    output = done.stdout + done.stderr
    assert "backend qorven.runtime.mail.NoMailServer" in output and "sent 0" in output
    assert "therapy" not in output and "priya@example.com" not in output


def test_an_email_reply_with_no_mail_server_configured_fails_at_once_saying_so(
    client, world, email, model_server, drain, settings
):
    """A reply with nowhere to go ends failed at the first try, where the person and the
    admin see it, with the reason; it is not retried, and nothing is printed."""
    from channels_app.models import OutboundDelivery

    settings.EMAIL_BACKEND = "qorven.runtime.mail.NoMailServer"
    pair(world, "email", "priya@example.com", world.alice)
    model_server.add(reply("Sure, May works."))
    post_email(client, email_body("Can we go in May?", "<m1@example.com>"))
    drain()
    (part,) = OutboundDelivery.objects.filter(message__role="assistant")
    assert (part.state, part.attempts) == ("failed", 1)
    assert "no mail server is configured" in part.last_error and "EMAIL_URL" in part.last_error
    # Our notice that it did not get there meets the same, once, and that is the end of it.
    (notice,) = OutboundDelivery.objects.filter(message__role="system")
    assert (notice.state, notice.attempts) == ("failed", 1)
    assert mail.outbox == []


def test_email_attachments_are_kept_images_and_files_and_the_rest_left_out(client, world, email, model_server,
                                                                           drain):
    import base64
    import io

    from PIL import Image as PILImage

    from sessions_app.models import Image

    pair(world, "email", "priya@example.com", world.alice)
    model_server.default = reply("Thanks, I have the ticket and the itinerary.")
    png = io.BytesIO()
    PILImage.new("RGB", (4, 4), "navy").save(png, format="PNG")
    itinerary = pdf("Flight BA117 leaves Heathrow at 09:40")
    body = email_body("Ticket and itinerary attached.", "<m20@example.com>")
    body["attachments"] = [
        {"filename": "ticket.png", "content_type": "image/png", "content": base64.b64encode(png.getvalue()).decode()},
        {"filename": "itinerary.pdf", "content_type": "application/pdf",
         "content": base64.b64encode(itinerary).decode()},
        {"filename": "setup.exe", "content_type": "application/octet-stream",
         "content": base64.b64encode(b"MZ\x90\x00\x03").decode()},
        {"filename": "broken.txt", "content": "%%% not base64"},
    ]
    assert post_email(client, body).status_code == 200
    drain()
    kept = list(Image.objects.order_by("id").values_list("mime_type", "name"))
    assert kept == [("image/png", ""), ("application/pdf", "itinerary.pdf")]
    said = model_server.requests[0]["messages"][-1]["content"]
    assert "[image: image/png, 1 KB]" in said and (  # the PDF's text is read for the model
        "[file: itinerary.pdf, application/pdf, 1 KB]\nFlight BA117 leaves Heathrow at 09:40\n"
        "[end of itinerary.pdf]") in said
    assert "setup.exe" not in said
    assert len(mail.outbox) == 1


def test_email_attachments_left_out_in_the_webhook_are_counted_so_the_model_can_say_so(client, world, email,
                                                                                       model_server, drain, settings):
    import base64

    settings.QORVEN_MAX_UPLOAD = 64
    pair(world, "email", "priya@example.com", world.alice)
    model_server.default = reply("The scan was too large; could you send a smaller one?")
    body = email_body("Here is the scan.", "<m21@example.com>")
    body["attachments"] = [
        {"filename": "scan.txt", "content": base64.b64encode(b"big " * 100).decode()},  # over the limit
        {"filename": "setup.exe", "content": base64.b64encode(b"MZ\x90\x00\x03").decode()},  # not kept
    ]
    only_attachments = email_body("", "<m22@example.com>")
    only_attachments["subject"] = ""
    only_attachments["attachments"] = body["attachments"][:1]
    assert post_email(client, body).status_code == 200
    assert post_email(client, only_attachments).status_code == 200
    drain()
    first, second = Message.objects.filter(role="user").order_by("session_id", "seq")
    assert (first.metadata["left_out"], second.metadata["left_out"]) == (2, 1)
    said = sorted(str(r["messages"][-1]["content"]) for r in model_server.requests)  # threads run side by side
    assert said[0].startswith("[email] Priya: Trip plans\n\nHere is the scan. [2 attachments sent with this could "
                              "not be kept")
    # A mail that was nothing but a file that could not be kept still reaches the Qor.
    assert said[1].startswith("[email] Priya: [an attachment sent with this could not be kept")


# --- SMS -----------------------------------------------------------------------------------

def test_sms_is_verified_and_answered_through_the_messages_api(client, world, sms, platform, model_server, drain):
    pair(world, "sms", "+15557654321", world.alice)
    model_server.add(reply("Text back"))
    params = {"MessageSid": "SM1", "AccountSid": "AC123", "From": "+15557654321", "To": "+15550001111", "Body": "hi"}
    assert post_sms(client, params).status_code == 200
    assert post_sms(client, params, token="forged").status_code == 403  # as Twilio's request validation answers
    drain()
    (sent,) = platform.sent(r"/twilio/2010-04-01/Accounts/AC123/Messages.json")
    assert sent.form == {"To": "+15557654321", "From": "+15550001111", "Body": "Text back"}
    session = Session.objects.get()
    assert (session.kind, session.external_thread_id) == ("sms", "+15557654321")


def test_a_text_to_our_short_code_is_answered_from_it(client, world, platform, model_server, drain, settings):
    """Twilio names a short code by its digits alone (To=894546), and the reply goes from it."""
    settings.QORVEN_PUBLIC_URL = "https://qorven.example"
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="sms",
                   credentials={"number": "894546", "account_sid": "AC123", "auth_token": "twilio-token"})
    pair(world, "sms", "+15557654321", world.alice)
    model_server.add(reply("Text back"))
    params = {"MessageSid": "SM1", "AccountSid": "AC123", "From": "+15557654321", "To": "894546", "Body": "hi"}
    assert post_sms(client, params).status_code == 200
    drain()
    (sent,) = platform.sent(r"/twilio/2010-04-01/Accounts/AC123/Messages.json")
    assert sent.form == {"To": "+15557654321", "From": "894546", "Body": "Text back"}


# Ten seconds past the window either way: a stamp is whole seconds and the request takes time, so 301 s
# ahead could be 300 s ahead by the time it is checked.
@pytest.mark.parametrize("age", [310, -310, 365 * 86400])
def test_a_correctly_signed_discord_interaction_outside_five_minutes_is_refused(client, world, discord, discord_key,
                                                                              age):
    body = {"id": "5", "application_id": "9001", "type": 2, "token": "t", "version": 1,
            "data": {"id": "77", "name": "ask", "type": 1, "options": [{"name": "question", "type": 3, "value": "hi"}]},
            "user": {"id": "555", "username": "priya"}}
    raw = json.dumps(body).encode()
    stamp = str(int(time.time()) - age)
    response = client.post("/v1/webhooks/discord", data=raw, content_type="application/json",
                           HTTP_X_SIGNATURE_ED25519=discord_key.sign(stamp.encode() + raw).hex(),
                           HTTP_X_SIGNATURE_TIMESTAMP=stamp)
    assert response.status_code == 401 and "window" in response.json()["error"]
    assert not InboundEvent.objects.exists()


def test_the_gateway_stores_nothing_while_discord_is_switched_off(world, discord, platform, model_server, drain):
    from channels_app.receive import gateway_frame_receive
    from tenancy.models import PluginSetting

    pair(world, "discord", "80351110224678912", world.alice)
    model_server.default = reply("Hi.")
    assert gateway_frame_receive(binding=discord, frame={"op": 0, "t": "MESSAGE_CREATE", "d": DM_CREATE},
                                 bot_id="9001") is not None
    drain()
    assert gateway_frame_receive(binding=discord, frame={"op": 0, "t": "TYPING_START", "d": {}}, bot_id="9001") is None
    PluginSetting.objects.create(tenant=world.tenant_a, kind="channel", name="discord", enabled=False)
    later = {**DM_CREATE, "id": "1111111111111111112", "content": "still there?"}
    assert gateway_frame_receive(binding=discord, frame={"op": 0, "t": "MESSAGE_CREATE", "d": later},
                                 bot_id="9001") is None
    drain()
    assert list(InboundEvent.objects.values_list("external_id", flat=True)) == [DM_CREATE["id"]]
    assert list(Message.objects.filter(role="user").values_list("content", flat=True)) == ["hello from discord"]
    assert [r.json["content"] for r in platform.sent("/messages")] == ["Hi."]


def test_an_mms_picture_is_fetched_with_the_accounts_key_and_one_elsewhere_is_not(client, world, sms, platform,
                                                                                    model_server, drain):
    """MMS pictures were counted as left out, never fetched: the model could only say it
    could not open them."""
    from PIL import Image as PILImage

    from sessions_app.models import Image

    from ..fakes.platform_server import Canned

    png = io.BytesIO()
    PILImage.new("RGB", (4, 4), "teal").save(png, format="PNG")
    media = "/twilio/2010-04-01/Accounts/AC123/Messages/MM1/Media/ME1"
    platform.script(media, Canned(raw=png.getvalue(), headers={"Content-Type": "image/png"}))
    pair(world, "sms", "+15557654321", world.alice)
    model_server.default = reply("A teal square.")
    post_sms(client, {"From": "+15557654321", "To": "+15550001111", "Body": "", "MessageSid": "MM1",
                      "NumMedia": "2", "MediaUrl0": platform.url + media, "MediaContentType0": "image/png",
                      "MediaUrl1": "http://10.0.0.5/steal.png", "MediaContentType1": "image/png"})
    drain()
    assert list(Image.objects.values_list("mime_type", flat=True)) == ["image/png"]
    (fetched,) = platform.sent(media)
    assert fetched.headers["Authorization"] == "Basic " + base64.b64encode(b"AC123:twilio-token").decode()
    said = model_server.requests[0]["messages"][-1]["content"]
    assert "[image: image/png" in said and "could not be kept" in said  # the one at 10.0.0.5
    assert Message.objects.filter(role="assistant").exists()
