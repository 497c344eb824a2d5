"""Which API key a Qor's model route sends to its server.

Model servers and their key belong to the host: OPENAI_API_KEY goes only to the host's own
model server (OPENAI_BASE_URL, or OpenAI's when that is empty) and to the base URLs listed
in QORVEN_MODEL_KEY_URLS; a route anywhere else sends its own key, or none. Decided here,
below qorven.llm, so that what reads a route's state (the admin) names the same key as
the calls do: a rate limit cools the key that was limited (qorven.runtime.cooldowns).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    from .models import Qor

OPENAI_DEFAULT_URL = "https://api.openai.com/v1"  # the SDK's, when OPENAI_BASE_URL is empty


def _normal(url: str) -> str:
    return (url or OPENAI_DEFAULT_URL).strip().rstrip("/").lower()


def host_key_for(base_url: str) -> str:
    """OPENAI_API_KEY if `base_url` is a model server the host trusts with it, else ""."""
    trusted = {_normal(settings.OPENAI_BASE_URL), *(_normal(u) for u in settings.QORVEN_MODEL_KEY_URLS)}
    return settings.OPENAI_API_KEY if _normal(base_url) in trusted else ""


def role_api_key(qor: Qor, role: str) -> str:
    """The key stored on the Qor for `role`: its own, else the main route's when the role
    has no server of its own (a role on the main route's server uses the main key)."""
    own_url = getattr(qor, f"{role}_base_url")
    return getattr(qor, f"{role}_api_key") or ("" if own_url else qor.main_api_key)


def route_key(*, api_key: str, base_url: str) -> str:
    """The key a route sends: its own, else the host's where the host trusts the server."""
    return api_key or host_key_for(base_url)
