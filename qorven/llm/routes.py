"""Which model serves which role of a Qor: main agent, summarizer, heartbeat.

Model servers and their key belong to the host. OPENAI_API_KEY goes only to the host's
own model server (OPENAI_BASE_URL, or OpenAI's when that is empty) and to the base URLs
listed in QORVEN_MODEL_KEY_URLS; a Qor routed anywhere else is called without it
(tenancy.model_keys decides, for the calls and for the admin alike). A base
URL stored on a Qor (only superusers edit those) must also pass the address policy
(qorven.runtime.outbound) before each use, and its client connects only to addresses the
policy allows, whatever the name resolves to by then.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from django.conf import settings

from qorven.runtime.outbound import AddressRefused, check_url
from tenancy.model_keys import role_api_key, route_key
from tenancy.models import Qor
from tenancy.selectors import model_fallbacks_read

from .errors import ModelRefused
from .offline import OfflineProvider
from .provider import Completion, Provider, TokenCallback

if TYPE_CHECKING:
    from .openai_provider import OpenAIProvider

Role = Literal["main", "summarizer", "heartbeat"]


@dataclass(frozen=True)
class ModelRoute:
    base_url: str
    model: str  # empty: no model configured, the offline provider answers
    num_ctx: int
    from_qor: bool = False  # the base URL was stored on the Qor, not set by the host
    vision: bool = False  # the model accepts images (sent as image_url content parts)
    api_key: str = field(default="", repr=False)  # the route's own key; empty: the host's (tenancy.model_keys)
    label: str = "main"  # what /status and the admin call it: "main", "main fallback 1"
    max_concurrency: int = 0  # calls at once to this server across every process; 0: no cap

    @property
    def key(self) -> str:
        """The key sent to this route's server: its own, else the host's where trusted."""
        return route_key(api_key=self.api_key, base_url=self.base_url)

    @property
    def offline(self) -> bool:
        return not self.model


def route_for(qor: Qor, role: Role = "main") -> ModelRoute:
    """The Qor's route for `role`; empty fields fall back to the main route, then to
    OPENAI_BASE_URL / QORVEN_MODEL."""
    own_url = getattr(qor, f"{role}_base_url")
    base_url, model, from_qor = qor.route_target(role)
    num_ctx = getattr(qor, f"{role}_num_ctx") or qor.main_num_ctx or settings.QORVEN_NUM_CTX
    api_key = role_api_key(qor, role)
    cap = getattr(qor, f"{role}_max_concurrency") or (None if own_url else qor.main_max_concurrency)
    return ModelRoute(base_url=base_url, model=model, num_ctx=num_ctx, from_qor=from_qor,
                      vision=role == "main" and bool(getattr(qor, "main_vision", False)), api_key=api_key, label=role,
                      max_concurrency=cap or 0)


def routes_for(qor: Qor, role: Role = "main") -> list[ModelRoute]:
    """The role's route, then its fallbacks in order (read at most every
    QORVEN_ROUTE_CACHE_SECONDS per process)."""
    first = route_for(qor, role)
    if first.offline:
        return [first]
    return [first, *(
        ModelRoute(base_url=row.base_url, model=row.model, num_ctx=row.num_ctx or first.num_ctx, from_qor=True,
                   vision=first.vision, api_key=row.api_key, label=f"{role} fallback {n}",
                   max_concurrency=row.max_concurrency or 0)
        for n, row in enumerate(model_fallbacks_read(qor=qor, role=role), start=1)
    )]


def provider_for_role(qor: Qor, role: Role = "main") -> Provider:
    """What answers the role's model calls: its route, failing over to its fallbacks."""
    from .failover import FailoverProvider

    routes = routes_for(qor, role)
    return provider_for(routes[0]) if len(routes) == 1 else FailoverProvider(routes)


def transcriber_route(qor: Qor) -> ModelRoute | None:
    """The Qor's speech-to-text route, or None when it has no transcriber model (voice
    notes are then not transcribed). The base URL falls back to the main route's."""
    if not qor.transcriber_model:
        return None
    stored = qor.transcriber_base_url or qor.main_base_url
    api_key = qor.transcriber_api_key or ("" if qor.transcriber_base_url else qor.main_api_key)
    return ModelRoute(base_url=stored or settings.OPENAI_BASE_URL, model=qor.transcriber_model, num_ctx=0,
                      from_qor=bool(stored), api_key=api_key, label="transcriber")


def transcribe(route: ModelRoute, *, audio: bytes, mime_type: str) -> str:
    """The text of a voice note, through the route's /audio/transcriptions. Raises a
    ModelError (ProviderUnavailable when trying again later may help)."""
    if route.from_qor:
        try:
            check_url(route.base_url)
        except AddressRefused as exc:
            raise ModelRefused(f"model route refused: {exc}", kind="misconfigured", model=route.model) from None
    from .openai_provider import transcription_create  # see _openai_provider

    return transcription_create(
        base_url=route.base_url, api_key=route.key, model=route.model, audio=audio,
        mime_type=mime_type, timeout=settings.QORVEN_MODEL_TIMEOUT, max_retries=settings.QORVEN_MODEL_RETRIES,
        guarded=route.from_qor,
    )


class RefusedRoute:
    """A route this server will not call: every completion fails as misconfigured."""

    def __init__(self, model: str, reason: str) -> None:
        self.model = model
        self.reason = reason

    def complete(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        on_token: TokenCallback | None = None,
    ) -> Completion:
        raise ModelRefused(f"model route refused: {self.reason}", kind="misconfigured", model=self.model)

    def slot_look(self) -> None:
        """Never called, never waited for."""

    def slot_leave(self) -> None:
        """Never waited for."""


def _openai_provider() -> type[OpenAIProvider]:
    """The SDK's provider class, imported on first use: importing `openai` takes about a
    second, which every `qorven` command (and the terminal's start) would otherwise pay
    without ever calling a model. `qorven serve` and `qorven worker` load it as they start
    (`sdk_load`), so no turn waits for it."""
    from .openai_provider import OpenAIProvider

    return OpenAIProvider


def sdk_load() -> None:
    """As a process that will call models starts: import the model SDK and build the
    client of the host's own model server (OPENAI_BASE_URL / QORVEN_MODEL), the route of
    every Qor without one of its own. The first turn would otherwise pay both (building
    a client loads the CA store and the SDK's lazily imported modules: tens of
    milliseconds), and a worker pays it in each child: its children are forked after
    this and start with both."""
    _openai_provider()
    if settings.QORVEN_MODEL:
        provider_for(ModelRoute(base_url=settings.OPENAI_BASE_URL, model=settings.QORVEN_MODEL, num_ctx=0))


def provider_for(route: ModelRoute, *, max_retries: int | None = None) -> Provider:
    if route.offline:
        return OfflineProvider()
    if route.from_qor:
        try:
            check_url(route.base_url)
        except AddressRefused as exc:
            return RefusedRoute(route.model, str(exc))
    return _openai_provider()(
        base_url=route.base_url,
        api_key=route.key,
        model=route.model,
        timeout=settings.QORVEN_MODEL_TIMEOUT,
        max_retries=settings.QORVEN_MODEL_RETRIES if max_retries is None else max_retries,
        deadline=settings.QORVEN_MODEL_DEADLINE,
        max_concurrency=route.max_concurrency,
        max_chars=settings.QORVEN_MAX_REPLY_CHARS,
        max_tool_calls=settings.QORVEN_MAX_TOOL_CALLS,
        guarded=route.from_qor,
    )


def model_probe(*, base_url: str, api_key: str, model: str) -> None:
    """One short completion from a model server that is not configured yet (`qorven
    setup` checks what it is about to write). Raises a ModelError."""
    provider = _openai_provider()(base_url=base_url, api_key=api_key, model=model, timeout=settings.QORVEN_MODEL_TIMEOUT,
                              max_retries=0, deadline=settings.QORVEN_MODEL_DEADLINE,
                              max_chars=settings.QORVEN_MAX_REPLY_CHARS, max_tool_calls=settings.QORVEN_MAX_TOOL_CALLS)
    provider.complete(messages=[{"role": "user", "content": "Reply with one word: ok"}])
