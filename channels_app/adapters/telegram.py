"""Telegram Bot API: webhook Updates in, getFile for their photos, voice notes and files
(documents), sendMessage out.

The webhook is registered with a secret token; Telegram echoes it in
`X-Telegram-Bot-Api-Secret-Token`, which both authenticates the request and names the
binding (stored as its SHA-256). Credentials: `token` (the bot token), `username`.
"""
from __future__ import annotations

import base64
import logging
import re
from typing import Any

import httpx
from django.conf import settings
from django.http import HttpRequest
from pydantic import BaseModel, Field, ValidationError

from ..formatting import TELEGRAM_HTML
from ..inbound import InboundImage, InboundMedia, InboundMessage
from ..json_body import json_body
from ..models import ChannelBinding
from .base import (
    Adapter,
    Parsed,
    SendError,
    WebhookRejected,
    checked_media,
    download_limited,
    platform_client,
    secret_digest,
    send_unreachable,
    webhook_url,
)

logger = logging.getLogger(__name__)
MAX_PHOTO_BYTES = 5 * 1024 * 1024
# What getFile lets a bot download; a document is kept up to QORVEN_MAX_UPLOAD within it.
MAX_FILE_BYTES = 20 * 1024 * 1024
TOPIC_SEP = "|"  # a reply target in a forum topic: the chat id, then the topic's thread id
# The updates setWebhook asks for (`qorven doctor` checks a registered webhook gets them).
ALLOWED_UPDATES = ("message", "edited_message")


class TgUser(BaseModel):
    id: int
    is_bot: bool = False
    first_name: str = ""
    last_name: str = ""
    username: str = ""


class TgChat(BaseModel):
    id: int
    type: str
    title: str = ""


class TgPhoto(BaseModel):
    file_id: str
    file_size: int = 0


class TgVoice(BaseModel):
    """A voice note (`voice`) or a sent audio file (`audio`)."""

    file_id: str
    file_size: int = 0
    mime_type: str = ""


class TgDocument(BaseModel):
    """A file sent as one: a PDF, a text file, a photo sent "as a file" (uncompressed)."""

    file_id: str
    file_name: str = ""
    file_size: int = 0
    mime_type: str = ""


class TgMessage(BaseModel):
    message_id: int
    chat: TgChat
    # "from" at every level, the replied-to message's too (whose sender says whether a
    # reply in a group is addressed to the bot).
    from_: TgUser | None = Field(default=None, alias="from")
    text: str = ""
    caption: str = ""
    photo: list[TgPhoto] = []
    voice: TgVoice | None = None
    audio: TgVoice | None = None
    document: TgDocument | None = None
    # Never fetched: a video is not kept (an animation, a GIF turned MP4, comes with a
    # `document` beside it, which is not fetched for it either).
    video: dict[str, Any] | None = None
    video_note: dict[str, Any] | None = None
    animation: dict[str, Any] | None = None
    reply_to_message: TgMessage | None = None
    # A forum topic's thread (is_topic_message); any supergroup names one for a reply too.
    message_thread_id: int | None = None
    is_topic_message: bool = False
    # The service messages of a group upgraded to a supergroup, which gets a new chat id:
    # in the old chat, the new id; in the new chat, the old one.
    migrate_to_chat_id: int | None = None
    migrate_from_chat_id: int | None = None

    model_config = {"populate_by_name": True}

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> TgMessage:
        return cls.model_validate(data)


def bot_id_of(binding: ChannelBinding) -> int | None:
    """The bot's own user id: the number its token begins with (123456:ABC-…)."""
    head = str(binding.credentials.get("token", "")).partition(":")[0]
    return int(head) if head.isdigit() else None


# The secret_token setWebhook takes (Bot API): 1 to 256 of these.
SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")
# A bot token: the bot's id, a colon, its key.
BOT_TOKEN = re.compile(r"[0-9]+:[A-Za-z0-9_-]+")


class TelegramAdapter(Adapter):
    kind = "telegram"
    limit = 4096
    style = TELEGRAM_HTML
    groups = True
    credentials = {
        "token": "the bot token from @BotFather (123456789:AAF…)",
        "secret": "the secret_token you register the webhook with (setWebhook): 1 to 256 letters, digits, _ and -",
        "username": "the bot's @username, to notice mentions in groups",
    }
    required = ("token", "secret")

    def lookup_key(self, credentials: dict[str, str]) -> str:
        return secret_digest(credentials["secret"])

    def credentials_problem(self, credentials: dict[str, str]) -> tuple[str, str] | None:
        # A bot token is the bot's id, a colon and its key, and every call's URL is made of
        # it (/bot<token>/sendMessage): anything else could only fail every send.
        token = credentials.get("token", "")
        if token and not BOT_TOKEN.fullmatch(token):
            return "token", ("must be the bot token @BotFather gives, like 123456789:AAF…: digits, a colon, then "
                             "letters, digits, _ and - (without a leading 'bot' or spaces)")
        # Telegram's setWebhook takes a secret_token of 1 to 256 letters, digits, _ and -: with
        # any other the webhook cannot be registered, and no update would name the binding.
        secret = credentials.get("secret", "")
        if not secret or SECRET_TOKEN.fullmatch(secret):
            return None
        if len(secret) > 256:
            return "secret", f"is at most 256 characters (Telegram's limit), got {len(secret)}"
        return "secret", ("takes letters, digits, _ and - only (Telegram's rule for the webhook's secret_token), "
                          "e.g. one `python -c 'import secrets; print(secrets.token_urlsafe(24))'` makes")

    def webhook_register(self, binding: ChannelBinding) -> str:
        """Point the bot's webhook at this server (setWebhook with the binding's secret);
        return the URL registered. Raises SendError with Telegram's verdict."""
        url = webhook_url(self.kind)
        base = f"{settings.TELEGRAM_API_BASE.rstrip('/')}/bot{binding.credentials.get('token', '')}"
        try:
            answer = platform_client().post(f"{base}/setWebhook", json={
                "url": url, "secret_token": binding.credentials.get("secret", ""),
                "allowed_updates": list(ALLOWED_UPDATES)})
        except httpx.HTTPError as exc:  # no answer: said as a SendError, like every send's
            raise send_unreachable("Telegram", exc) from None
        body = answer.json() if answer.headers.get("content-type", "").startswith("application/json") else {}
        if answer.status_code != 200 or not body.get("ok"):
            raise SendError(f"Telegram refused setWebhook (HTTP {answer.status_code}: {body.get('description', '')})",
                            permanent=answer.status_code < 500)
        return url

    def resolve(self, request: HttpRequest) -> ChannelBinding:
        secret = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not secret:
            raise WebhookRejected(401, "missing X-Telegram-Bot-Api-Secret-Token")
        return self.enabled_binding(secret_digest(secret))

    def parse(self, request: HttpRequest, binding: ChannelBinding) -> Parsed:
        try:
            update = json_body(request)
            update = update if isinstance(update, dict) else {}
            edit = not isinstance(update.get("message"), dict)
            raw = update.get("edited_message" if edit else "message")
            if not isinstance(raw, dict):
                return Parsed([])  # callbacks, member updates, …: acknowledged, ignored
            message = TgMessage.from_payload(raw)
        except ValidationError as exc:
            # Where it failed, not pydantic's text: that quotes the input (the message's
            # text, its sender's id and name).
            where = ", ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['type']}" for e in exc.errors()[:5])
            logger.info("ignoring an unreadable Telegram update (%s)", where)
            return Parsed([])
        except ValueError as exc:
            logger.info("ignoring an unreadable Telegram update: %s", exc)
            return Parsed([])
        sender = message.from_
        if not edit and (message.migrate_to_chat_id or message.migrate_from_chat_id):
            return Parsed([self._migrated(message)])
        if sender is None or sender.is_bot:
            return Parsed([])
        text = message.text or message.caption
        media = self._photo(message) + self._voice(message) + self._document(message)
        left_out = int(any(v is not None for v in (message.video, message.video_note, message.animation)))
        if not text.strip() and not media and not left_out:
            return Parsed([])  # a sticker, a location, a poll: nothing to read or answer (as on every surface)
        group = message.chat.type in ("group", "supergroup")
        name = " ".join(p for p in (sender.first_name, sender.last_name) if p) or sender.username
        addressed = (not group) or self._addressed(message, binding)
        external_id, extra = f"{message.chat.id}:{message.message_id}", {}
        if edit:
            # An edit asks a question only where it adds a mention of the bot to a group
            # message that was not answered (the task looks); any other edit changes nothing.
            if not (group and addressed):
                return Parsed([])
            external_id, extra = f"{external_id}:edited", {"edit_of": external_id}
        inbound = InboundMessage(
            channel="telegram",
            external_id=external_id,
            sender_id=str(sender.id),
            sender_name=name,
            text=text,
            group=group,
            # A forum topic is a conversation of its own, keyed like its reply target; the
            # General topic and a group without topics are the chat, as they always were.
            thread_id=self._reply_target(message) if group else "",
            addressed=addressed,
            reply_target=self._reply_target(message),
            media=media,
            left_out=left_out,
            extra=extra,
        )
        return Parsed([inbound])

    @staticmethod
    def _migrated(message: TgMessage) -> InboundMessage:
        """A group upgraded to a supergroup, told in the old chat or in the new one: the
        group's conversation moves to the new chat id (channels_app.inbound_rules). Nothing to
        answer or keep as chatter."""
        if message.migrate_to_chat_id:
            old, new = message.chat.id, message.migrate_to_chat_id
        else:
            old, new = message.migrate_from_chat_id or 0, message.chat.id
        return InboundMessage(
            channel="telegram", external_id=f"{message.chat.id}:{message.message_id}",
            sender_id=str(message.from_.id) if message.from_ else "", group=True, thread_id=str(new),
            addressed=False, extra={"migrated_from": str(old)},
        )

    @staticmethod
    def _reply_target(message: TgMessage) -> str:
        """The chat, and the forum topic the message was written in: the answer goes there,
        not to the group's General topic. Only a topic's thread: the one Telegram names for a
        reply in a group without topics is not one sendMessage takes."""
        if message.is_topic_message and message.message_thread_id:
            return f"{message.chat.id}{TOPIC_SEP}{message.message_thread_id}"
        return str(message.chat.id)

    @staticmethod
    def _addressed(message: TgMessage, binding: ChannelBinding) -> bool:
        """Mentioned by the bot's @username (a command too: /status@aria_bot), or a reply to
        one of the bot's own messages. Every bot in a group is sent every message, so a
        mention of another bot whose name begins like ours (@aria_bot_helper), or a reply to
        another bot, is not ours to answer."""
        username = str(binding.credentials.get("username", "")).lstrip("@")
        text = message.text or message.caption
        if username and re.search(rf"@{re.escape(username)}(?![A-Za-z0-9_])", text, flags=re.IGNORECASE):
            return True
        replied = message.reply_to_message
        if replied is None or replied.from_ is None or not replied.from_.is_bot:
            return False
        bot_id = bot_id_of(binding)
        if bot_id is not None:
            return replied.from_.id == bot_id
        return bool(username) and replied.from_.username.lower() == username.lower()

    @staticmethod
    def _photo(message: TgMessage) -> list[InboundMedia]:
        """The photo's largest size, named only: the processing task fetches it."""
        if not message.photo:
            return []
        best = max(message.photo, key=lambda p: p.file_size)  # Telegram lists sizes, smallest first
        return [InboundMedia(kind="photo", file_id=best.file_id, mime_type="image/jpeg", size=best.file_size or None)]

    @staticmethod
    def _voice(message: TgMessage) -> list[InboundMedia]:
        """A voice note or an audio file, named only: the processing task fetches and
        transcribes it."""
        sound = message.voice or message.audio
        if sound is None:
            return []
        mime = sound.mime_type or "audio/ogg"  # a voice note is OGG/Opus
        return [InboundMedia(kind="voice", file_id=sound.file_id, mime_type=mime, size=sound.file_size or None)]

    @staticmethod
    def _document(message: TgMessage) -> list[InboundMedia]:
        """A file, named only: the processing task fetches it and keeps it by its content."""
        document = message.document
        if document is None or message.animation is not None:
            return []
        return [InboundMedia(kind="file", file_id=document.file_id, mime_type=document.mime_type,
                             size=document.file_size or None, name=document.file_name)]

    def fetch_media(self, binding: ChannelBinding, media: InboundMedia) -> InboundImage | None:
        """getFile, then the file: a photo or a voice note up to MAX_PHOTO_BYTES, a document
        up to QORVEN_MAX_UPLOAD (kept when it is an image, a PDF, a text file or audio, by
        its content). The URLs hold the bot token, so a failure is logged by its kind only."""
        what = {"photo": "photo", "voice": "voice note"}.get(media.kind, "document")
        limit = min(settings.QORVEN_MAX_UPLOAD, MAX_FILE_BYTES) if media.kind == "file" else MAX_PHOTO_BYTES
        if media.size is not None and media.size > limit:
            logger.warning("a Telegram %s on binding %s is too big to keep (%s bytes)", what, binding.pk, media.size)
            return None
        token = binding.credentials.get("token", "")
        base = settings.TELEGRAM_API_BASE.rstrip("/")
        try:
            with self.http() as client:
                meta = client.get(f"{base}/bot{token}/getFile", params={"file_id": media.file_id})
                meta.raise_for_status()
                path = meta.json()["result"]["file_path"]
                content = download_limited(client, f"{base}/file/bot{token}/{path}", limit=limit)
        except Exception as exc:  # the text still counts; the attachment is left out
            status = f" {exc.response.status_code}" if isinstance(exc, httpx.HTTPStatusError) else ""
            logger.warning("could not fetch a Telegram %s on binding %s: %s%s", what, binding.pk,
                           type(exc).__name__, status)
            return None
        if content is None:
            logger.warning("a Telegram %s on binding %s is too big to keep", what, binding.pk)
            return None
        if media.kind == "file":
            return checked_media(binding, media, content, "Telegram")
        if media.kind == "voice":
            mime = media.mime_type or "audio/ogg"
        else:
            mime = "image/png" if path.lower().endswith(".png") else "image/jpeg"
        return InboundImage(mime_type=mime, data=base64.b64encode(content).decode(), size=len(content))

    def length(self, text: str) -> int:
        """Telegram counts a message's 4096 in UTF-16 code units (on the text it shows, its
        tags read: TELEGRAM_HTML.visible): an emoji outside the Basic Multilingual Plane
        (😀, most CJK extensions) is two."""
        return len(text.encode("utf-16-le")) // 2

    def send(self, binding: ChannelBinding, target: str, text: str) -> str:
        """sendMessage, in HTML parse mode, to the chat (and forum topic) of `target`. A
        group upgraded to a supergroup meanwhile is refused by its old id with the new one
        named (`parameters.migrate_to_chat_id`): the part goes there, once."""
        try:
            return self._send(binding, target, text)
        except SendError as exc:
            moved = exc.migrated_to
            if moved is None:
                raise
        chat, sep, topic = target.partition(TOPIC_SEP)
        logger.info("a Telegram group on binding %s became a supergroup; its reply goes to the new chat", binding.pk)
        return self._send(binding, f"{moved}{sep}{topic}", text)

    def _send(self, binding: ChannelBinding, target: str, text: str) -> str:
        """The part, in HTML; one Telegram cannot parse (a part planned as plain text before
        replies were formatted, a tag it no longer takes) is sent once more as the plain
        text it would have shown: the refused request delivered nothing."""
        token = binding.credentials.get("token", "")
        url = f"{settings.TELEGRAM_API_BASE.rstrip('/')}/bot{token}/sendMessage"
        chat, _, topic = target.partition(TOPIC_SEP)
        payload: dict[str, Any] = {"chat_id": chat, "text": text, "parse_mode": "HTML"}
        if topic.isdigit():
            payload["message_thread_id"] = int(topic)
        response = self._post(url, payload)
        if response.status_code == 400 and _unparsed(response):
            logger.warning("Telegram could not parse a part's HTML on binding %s (%s); it is sent as plain text",
                           binding.pk, _description(response))
            del payload["parse_mode"]
            payload["text"] = TELEGRAM_HTML.unformatted(text, limit=self.limit, size=self.length)
            response = self._post(url, payload)
        retry_after = None
        if response.status_code == 429:
            try:
                retry_after = float(response.json().get("parameters", {}).get("retry_after"))
            except (ValueError, TypeError, AttributeError):
                retry_after = None
        try:
            self.raise_for_status(response, retry_after=retry_after, account=ACCOUNT_REFUSED,
                                  chat=_chat_refused(response))
        except SendError as exc:
            exc.migrated_to = _migrated_to(response) if response.status_code == 400 else None
            raise
        return self.accepted_id(response, "result", "message_id")

    def _post(self, url: str, payload: dict[str, Any]) -> Any:
        try:
            with self.http() as client:
                return client.post(url, json=payload)
        except Exception as exc:
            raise send_unreachable("Telegram", exc) from None


# What Telegram answers a bot token it does not take: one revoked or mistyped (401
# Unauthorized), one no bot has (404 Not Found).
ACCOUNT_REFUSED = (401, 404)
# Its 403 is one chat's ("Forbidden: bot was blocked by the user", "…kicked from the group
# chat", "…user is deactivated"): nothing reaches that chat, though the bot still sends elsewhere.
CHAT_REFUSED = 403
# Its 400 "chat not found": a chat that is gone, or one the bot never had (a group it was
# removed from before a supergroup move) — nothing reaches it either.
CHAT_GONE = "chat not found"


def _chat_refused(response: Any) -> bool:
    return response.status_code == CHAT_REFUSED or (
        response.status_code == 400 and CHAT_GONE in _description(response).lower())


def _description(response: Any) -> str:
    try:
        return str(response.json().get("description") or "")[:300]
    except (ValueError, AttributeError):
        return ""


def _unparsed(response: Any) -> bool:
    """Whether Telegram refused a message because it could not parse its entities."""
    return "can't parse entities" in _description(response).lower()


def _migrated_to(response: Any) -> int | None:
    """The new chat id Telegram names when refusing a group that became a supergroup."""
    try:
        moved = response.json().get("parameters", {}).get("migrate_to_chat_id")
    except (ValueError, AttributeError):
        return None
    return moved if isinstance(moved, int) and not isinstance(moved, bool) else None
