"""Which model serves which role of a Qor: main agent, summarizer, heartbeat.

Model servers and their key belong to the host. OPENAI_API_KEY goes only to the host's
own model server (OPENAI_BASE_URL, or OpenAI's when that is empty) and to the base URLs
listed in QORVEN_MODEL_KEY_URLS; a Qor routed anywhere else is called without it. A base
URL stored on a Qor (only superusers edit those) must also pass the address policy
(qorven.runtime.outbound) before each use.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from django.conf import settings

from qorven.runtime.outbound import AddressRefused, check_url
from tenancy.models import Qor

from .errors import ModelRefused
from .offline import OfflineProvider
from .openai_provider import OpenAIProvider, transcription_create
from .provider import Provider

Role = Literal["main", "summarizer", "heartbeat"]


OPENAI_DEFAULT_URL = "https://api.openai.com/v1"  # the SDK's, when OPENAI_BASE_URL is empty


@dataclass(frozen=True)
class ModelRoute:
    base_url: str
    model: str  # empty: no model configured, the offline provider answers
    num_ctx: int
    from_qor: bool = False  # the base URL was stored on the Qor, not set by the host
    vision: bool = False  # the model accepts images (sent as image_url content parts)

    @property
    def offline(self) -> bool:
        return not self.model


def route_for(qor: Qor, role: Role = "main") -> ModelRoute:
    """The Qor's route for `role`; empty fields fall back to the main route, then to
    OPENAI_BASE_URL / QORVEN_MODEL."""
    stored = getattr(qor, f"{role}_base_url") or qor.main_base_url
    model = getattr(qor, f"{role}_model") or qor.main_model or settings.QORVEN_MODEL
    num_ctx = getattr(qor, f"{role}_num_ctx") or qor.main_num_ctx or settings.QORVEN_NUM_CTX
    return ModelRoute(base_url=stored or settings.OPENAI_BASE_URL, model=model, num_ctx=num_ctx, from_qor=bool(stored),
                      vision=role == "main" and bool(getattr(qor, "main_vision", False)))


def transcriber_route(qor: Qor) -> ModelRoute | None:
    """The Qor's speech-to-text route, or None when it has no transcriber model (voice
    notes are then not transcribed). The base URL falls back to the main route's."""
    if not qor.transcriber_model:
        return None
    stored = qor.transcriber_base_url or qor.main_base_url
    return ModelRoute(base_url=stored or settings.OPENAI_BASE_URL, model=qor.transcriber_model, num_ctx=0,
                      from_qor=bool(stored))


def transcribe(route: ModelRoute, *, audio: bytes, mime_type: str) -> str:
    """The text of a voice note, through the route's /audio/transcriptions. Raises a
    ModelError (ProviderUnavailable when trying again later may help)."""
    if route.from_qor:
        try:
            check_url(route.base_url)
        except AddressRefused as exc:
            raise ModelRefused(f"model route refused: {exc}", kind="misconfigured", model=route.model) from None
    return transcription_create(
        base_url=route.base_url, api_key=host_key_for(route.base_url), model=route.model, audio=audio,
        mime_type=mime_type, timeout=settings.QORVEN_MODEL_TIMEOUT, max_retries=settings.QORVEN_MODEL_RETRIES,
    )


def _normal(url: str) -> str:
    return (url or OPENAI_DEFAULT_URL).strip().rstrip("/").lower()


def host_key_for(base_url: str) -> str:
    """OPENAI_API_KEY if `base_url` is a model server the host trusts with it, else ""."""
    trusted = {_normal(settings.OPENAI_BASE_URL), *(_normal(u) for u in settings.QORVEN_MODEL_KEY_URLS)}
    return settings.OPENAI_API_KEY if _normal(base_url) in trusted else ""


class RefusedRoute:
    """A route this server will not call: every completion fails as misconfigured."""

    def __init__(self, model: str, reason: str) -> None:
        self.model = model
        self.reason = reason

    def complete(self, **kwargs) -> None:
        raise ModelRefused(f"model route refused: {self.reason}", kind="misconfigured", model=self.model)


def provider_for(route: ModelRoute) -> Provider:
    if route.offline:
        return OfflineProvider()
    if route.from_qor:
        try:
            check_url(route.base_url)
        except AddressRefused as exc:
            return RefusedRoute(route.model, str(exc))
    return OpenAIProvider(
        base_url=route.base_url,
        api_key=host_key_for(route.base_url),
        model=route.model,
        timeout=settings.QORVEN_MODEL_TIMEOUT,
        max_retries=settings.QORVEN_MODEL_RETRIES,
        deadline=settings.QORVEN_MODEL_DEADLINE,
    )


def model_probe(*, base_url: str, api_key: str, model: str) -> None:
    """One short completion from a model server that is not configured yet (`qorven
    setup` checks what it is about to write). Raises a ModelError."""
    provider = OpenAIProvider(base_url=base_url, api_key=api_key, model=model, timeout=settings.QORVEN_MODEL_TIMEOUT,
                              max_retries=0, deadline=settings.QORVEN_MODEL_DEADLINE)
    provider.complete(messages=[{"role": "user", "content": "Reply with one word: ok"}])
