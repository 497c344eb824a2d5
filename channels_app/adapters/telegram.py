"""Telegram Bot API: webhook Updates in, sendMessage out.

The webhook is registered with a secret token; Telegram echoes it in
`X-Telegram-Bot-Api-Secret-Token`, which both authenticates the request and names the
binding (stored as its SHA-256). Credentials: `token` (the bot token), `username`.
"""
from __future__ import annotations

import base64
import json
import logging
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from pydantic import BaseModel, ValidationError

from ..inbound import InboundImage, InboundMessage
from ..models import ChannelBinding
from .base import Adapter, Parsed, SendError, WebhookRejected, enabled_binding, secret_digest

logger = logging.getLogger(__name__)
MAX_PHOTO_BYTES = 5 * 1024 * 1024


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


class TgEntity(BaseModel):
    type: str
    offset: int
    length: int


class TgMessage(BaseModel):
    message_id: int
    chat: TgChat
    from_: TgUser | None = None
    text: str = ""
    caption: str = ""
    photo: list[TgPhoto] = []
    entities: list[TgEntity] = []
    reply_to_message: TgMessage | None = None

    model_config = {"populate_by_name": True}

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> TgMessage:
        return cls.model_validate({**data, "from_": data.get("from")})


class TelegramAdapter(Adapter):
    kind = "telegram"
    limit = 4096
    credentials = {
        "token": "the bot token from @BotFather",
        "secret": "the secret_token you register the webhook with (setWebhook)",
        "username": "the bot's @username, to notice mentions in groups",
    }
    required = ("token", "secret")

    def lookup_key(self, credentials: dict[str, str]) -> str:
        return secret_digest(credentials["secret"])

    def resolve(self, request: HttpRequest) -> ChannelBinding:
        secret = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not secret:
            raise WebhookRejected(401, "missing X-Telegram-Bot-Api-Secret-Token")
        return enabled_binding(self.kind, secret_digest(secret))

    def parse(self, request: HttpRequest, binding: ChannelBinding) -> Parsed:
        try:
            update = json.loads(request.body)
            raw = update.get("message") if isinstance(update, dict) else None
            if not isinstance(raw, dict):
                return Parsed([])  # edits, callbacks, member updates: acknowledged, ignored
            message = TgMessage.from_payload(raw)
        except (ValueError, ValidationError) as exc:
            logger.info("ignoring an unreadable Telegram update: %s", exc)
            return Parsed([])
        sender = message.from_
        if sender is None or sender.is_bot:
            return Parsed([])
        text = message.text or message.caption
        group = message.chat.type in ("group", "supergroup")
        name = " ".join(p for p in (sender.first_name, sender.last_name) if p) or sender.username
        inbound = InboundMessage(
            channel="telegram",
            external_id=f"{message.chat.id}:{message.message_id}",
            sender_id=str(sender.id),
            sender_name=name,
            text=text,
            group=group,
            thread_id=str(message.chat.id) if group else "",
            addressed=(not group) or self._addressed(message, binding),
            reply_target=str(message.chat.id),
            images=self._photos(binding, message),
        )
        return Parsed([inbound])

    @staticmethod
    def _addressed(message: TgMessage, binding: ChannelBinding) -> bool:
        username = str(binding.credentials.get("username", "")).lstrip("@").lower()
        text = message.text or message.caption
        for entity in message.entities:
            if entity.type == "mention" and username:
                if text[entity.offset : entity.offset + entity.length].lstrip("@").lower() == username:
                    return True
        if username and f"@{username}" in text.lower():
            return True
        replied = message.reply_to_message
        if replied is not None and replied.from_ is not None and replied.from_.is_bot:
            return not username or replied.from_.username.lower() == username
        return False

    def _photos(self, binding: ChannelBinding, message: TgMessage) -> list[InboundImage]:
        if not message.photo:
            return []
        best = max(message.photo, key=lambda p: p.file_size)  # Telegram lists sizes, smallest first
        token = binding.credentials.get("token", "")
        base = settings.TELEGRAM_API_BASE.rstrip("/")
        try:
            with self.http() as client:
                meta = client.get(f"{base}/bot{token}/getFile", params={"file_id": best.file_id}).json()
                path = meta["result"]["file_path"]
                data = client.get(f"{base}/file/bot{token}/{path}")
                data.raise_for_status()
        except Exception as exc:  # the text still counts; the photo is noted as missing
            logger.warning("could not fetch a Telegram photo: %s", type(exc).__name__)
            return []
        if len(data.content) > MAX_PHOTO_BYTES:
            return []
        mime = "image/png" if path.lower().endswith(".png") else "image/jpeg"
        return [InboundImage(mime_type=mime, data=base64.b64encode(data.content).decode(), size=len(data.content))]

    def send(self, binding: ChannelBinding, target: str, text: str) -> str:
        token = binding.credentials.get("token", "")
        url = f"{settings.TELEGRAM_API_BASE.rstrip('/')}/bot{token}/sendMessage"
        try:
            with self.http() as client:
                response = client.post(url, json={"chat_id": target, "text": text})
        except Exception as exc:
            raise SendError(f"Telegram unreachable: {type(exc).__name__}", permanent=False) from None
        retry_after = None
        if response.status_code == 429:
            try:
                retry_after = float(response.json().get("parameters", {}).get("retry_after"))
            except (ValueError, TypeError, AttributeError):
                retry_after = None
        self.raise_for_status(response, retry_after=retry_after)
        return str(response.json().get("result", {}).get("message_id", ""))
