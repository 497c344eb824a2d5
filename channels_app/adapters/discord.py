"""Discord: DMs and mentions arrive over the Gateway (`qorven discord-gateway`), the `/ask`
slash command over the Interactions endpoint; replies go out through the REST API.

Interactions are signed with Ed25519 over `X-Signature-Timestamp` + body, checked with the
application's public key; the binding is named by `application_id`. A PING is answered
with a PONG; `/ask` is deferred at once and answered with a follow-up message.
Credentials: `application_id`, `public_key`, `bot_token`.
"""
from __future__ import annotations

import time

from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.conf import settings
from django.http import HttpRequest, JsonResponse

from ..json_body import json_body
from ..inbound import InboundMessage
from ..models import ChannelBinding
from .base import Adapter, Parsed, SendError, WebhookRejected, enabled_binding

PING, APPLICATION_COMMAND = 1, 2
PONG, DEFERRED_CHANNEL_MESSAGE = 1, 5
FOLLOWUP = "followup:"


STAMP_WINDOW = 300  # seconds a signed interaction stays acceptable, as Slack's

class DiscordAdapter(Adapter):
    kind = "discord"
    limit = 2000
    credentials = {
        "application_id": "the application id",
        "public_key": "the application's public key (hex), for interaction signatures",
        "bot_token": "the bot token",
    }
    required = ("application_id", "public_key", "bot_token")

    def lookup_key(self, credentials: dict[str, str]) -> str:
        return credentials["application_id"]

    # --- Interactions endpoint ---
    def resolve(self, request: HttpRequest) -> ChannelBinding:
        signature = request.headers.get("X-Signature-Ed25519", "")
        stamp = request.headers.get("X-Signature-Timestamp", "")
        if not signature or not stamp:
            raise WebhookRejected(401, "missing Discord signature headers")
        try:
            app_id = str(json_body(request).get("application_id") or "")
        except (ValueError, AttributeError):
            raise WebhookRejected(400, "body is not Discord JSON") from None
        binding = enabled_binding(self.kind, app_id)
        try:
            key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(str(binding.credentials.get("public_key", ""))))
            key.verify(bytes.fromhex(signature), stamp.encode() + request.body)
        except (ValueError, InvalidSignature):
            raise WebhookRejected(401, "bad Discord signature") from None
        try:
            age = abs(time.time() - int(stamp))
        except ValueError:
            raise WebhookRejected(401, "bad Discord signature timestamp") from None
        if age > STAMP_WINDOW:  # a signed request replayed later
            raise WebhookRejected(401, "Discord signature timestamp outside the 5-minute window")
        return binding

    def parse(self, request: HttpRequest, binding: ChannelBinding) -> Parsed:
        body = json_body(request)
        if body.get("type") == PING:
            return Parsed([], JsonResponse({"type": PONG}))
        if body.get("type") != APPLICATION_COMMAND or (body.get("data") or {}).get("name") != "ask":
            return Parsed([], JsonResponse({"type": 4, "data": {"content": "Unknown command.", "flags": 64}}))
        options = {o.get("name"): o.get("value") for o in (body.get("data") or {}).get("options") or []}
        question = str(options.get("question") or options.get("text") or "").strip()
        user = (body.get("member") or {}).get("user") or body.get("user") or {}
        in_guild = bool(body.get("guild_id"))
        message = InboundMessage(
            channel="discord" if in_guild else "discord_dm",
            external_id=f"interaction:{body.get('id')}",
            sender_id=str(user.get("id", "")),
            sender_name=str(user.get("global_name") or user.get("username") or ""),
            text=question or "(empty question)",
            group=in_guild, thread_id=str(body.get("channel_id", "")) if in_guild else "",
            addressed=True,
            reply_target=FOLLOWUP + str(body.get("token", "")),
        )
        return Parsed([message], JsonResponse({"type": DEFERRED_CHANNEL_MESSAGE}))

    # --- Gateway ---
    def from_gateway(self, binding: ChannelBinding, event: dict[str, Any], bot_user_id: str) -> InboundMessage | None:
        """A Gateway MESSAGE_CREATE payload (`d`) as an InboundMessage, or None to ignore."""
        author = event.get("author") or {}
        if author.get("bot") or not event.get("content") or not event.get("id"):
            return None
        guild = event.get("guild_id")
        mentioned = any(str(m.get("id")) == bot_user_id for m in event.get("mentions") or [])
        referenced = ((event.get("referenced_message") or {}).get("author") or {}).get("id")
        channel_id = str(event.get("channel_id", ""))
        return InboundMessage(
            channel="discord" if guild else "discord_dm",
            external_id=str(event["id"]),
            sender_id=str(author.get("id", "")),
            sender_name=str(author.get("global_name") or author.get("username") or ""),
            text=str(event["content"]),
            group=bool(guild), thread_id=channel_id if guild else "",
            addressed=(not guild) or mentioned or str(referenced) == bot_user_id,
            reply_target=channel_id,
        )

    # --- REST ---
    def send(self, binding: ChannelBinding, target: str, text: str) -> str:
        base = settings.DISCORD_API_BASE.rstrip("/")
        headers: dict[str, str] = {}
        if target.startswith(FOLLOWUP):
            url = f"{base}/webhooks/{binding.lookup_key}/{target[len(FOLLOWUP):]}"
        else:
            url = f"{base}/channels/{target}/messages"
            headers["Authorization"] = f"Bot {binding.credentials.get('bot_token', '')}"
        try:
            with self.http() as client:
                response = client.post(url, json={"content": text}, headers=headers)
        except Exception as exc:
            raise SendError(f"Discord unreachable: {type(exc).__name__}", permanent=False) from None
        retry_after = None
        if response.status_code == 429:
            try:
                retry_after = float(response.json().get("retry_after"))
            except (ValueError, TypeError, AttributeError):
                retry_after = None
        self.raise_for_status(response, retry_after=retry_after)
        return str(response.json().get("id", ""))
