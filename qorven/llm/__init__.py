"""Model providers behind one small interface; the only package that imports `openai`."""
from __future__ import annotations

from .errors import (
    ContextLengthExceeded,
    ModelError,
    ModelRefused,
    ProviderUnavailable,
    SlotsBusy,
    WaitingForSlot,
)
from .provider import Completion, Provider, Restart, ToolCall, Usage, object_text
from .routes import ModelRoute, provider_for, provider_for_role, route_for, routes_for, sdk_load

__all__ = [
    "object_text",
    "Completion",
    "ContextLengthExceeded",
    "ModelError",
    "ModelRefused",
    "ModelRoute",
    "Provider",
    "ProviderUnavailable",
    "Restart",
    "SlotsBusy",
    "ToolCall",
    "Usage",
    "WaitingForSlot",
    "provider_for",
    "provider_for_role",
    "route_for",
    "routes_for",
    "sdk_load",
]
