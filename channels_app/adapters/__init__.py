"""The adapter registry: channel kind → adapter. Adding a platform means adding one class."""
from __future__ import annotations

from .base import Adapter, Parsed, SendError, WebhookRejected
from .telegram import TelegramAdapter
from .whatsapp import WhatsAppAdapter

ADAPTERS: dict[str, Adapter] = {a.kind: a for a in (TelegramAdapter(), WhatsAppAdapter())}


def adapter_for(kind: str) -> Adapter | None:
    return ADAPTERS.get(kind)


__all__ = ["ADAPTERS", "Adapter", "Parsed", "SendError", "WebhookRejected", "adapter_for"]
