"""Which model serves which role of a Qor: main agent, summarizer, heartbeat."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from django.conf import settings

from qorven.models import Qor

from .offline import OfflineProvider
from .openai_provider import OpenAIProvider
from .provider import Provider

Role = Literal["main", "summarizer", "heartbeat"]


@dataclass(frozen=True)
class ModelRoute:
    base_url: str
    model: str  # empty: no model configured, the offline provider answers
    num_ctx: int

    @property
    def offline(self) -> bool:
        return not self.model


def route_for(qor: Qor, role: Role = "main") -> ModelRoute:
    """The Qor's route for `role`; empty fields fall back to the main route, then to
    OPENAI_BASE_URL / QORVEN_MODEL."""
    base_url = getattr(qor, f"{role}_base_url") or qor.main_base_url or settings.OPENAI_BASE_URL
    model = getattr(qor, f"{role}_model") or qor.main_model or settings.QORVEN_MODEL
    num_ctx = getattr(qor, f"{role}_num_ctx") or qor.main_num_ctx or settings.QORVEN_NUM_CTX
    return ModelRoute(base_url=base_url, model=model, num_ctx=num_ctx)


def provider_for(route: ModelRoute) -> Provider:
    if route.offline:
        return OfflineProvider()
    return OpenAIProvider(
        base_url=route.base_url,
        api_key=settings.OPENAI_API_KEY,
        model=route.model,
        timeout=settings.QORVEN_MODEL_TIMEOUT,
        max_retries=settings.QORVEN_MODEL_RETRIES,
        deadline=settings.QORVEN_MODEL_DEADLINE,
    )
