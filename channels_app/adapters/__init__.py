"""The adapter registry: channel kind → adapter. Adding a platform means adding one class
here, and its kind to channels_app.platforms.PLATFORMS, which start-up reads without
importing the adapters (tests/channels_app/test_platforms.py holds the two together)."""
from __future__ import annotations

from .base import Adapter, Parsed, SendError, WebhookRejected
from .discord import DiscordAdapter
from .email import EmailAdapter
from .slack import SlackAdapter
from .sms import SmsAdapter
from .telegram import TelegramAdapter
from .webchat import WebchatAdapter
from .whatsapp import WhatsAppAdapter

ADAPTERS: dict[str, Adapter] = {
    a.kind: a
    for a in (TelegramAdapter(), WhatsAppAdapter(), SlackAdapter(), DiscordAdapter(), EmailAdapter(), SmsAdapter(),
              WebchatAdapter())
}


def adapter_for(kind: str) -> Adapter | None:
    return ADAPTERS.get(kind)


__all__ = ["ADAPTERS", "Adapter", "Parsed", "SendError", "WebhookRejected", "adapter_for"]
