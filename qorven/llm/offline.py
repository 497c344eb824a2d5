"""The built-in offline provider: answers with a notice when no model is configured, so the
whole pipeline (store, turn, stream, deliver) runs on a fresh machine."""
from __future__ import annotations

from typing import Any

from .provider import Completion, TokenCallback, Usage

OFFLINE_NOTICE = (
    "No model is configured, so I can't answer yet. Run `qorven setup` on the server (it asks for "
    "the model server and checks it), or set QORVEN_MODEL (and OPENAI_BASE_URL / OPENAI_API_KEY "
    "for your OpenAI-compatible server), or a model on this Qor in the admin."
)


class OfflineProvider:
    model = "offline"

    def complete(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        on_token: TokenCallback | None = None,
    ) -> Completion:
        if on_token is not None:
            on_token(OFFLINE_NOTICE)
        return Completion(content=OFFLINE_NOTICE, usage=Usage(0, 0), model=self.model, offline=True)

    def slot_look(self) -> None:
        """No server, no slot to wait for."""

    def slot_leave(self) -> None:
        """No server, no place in its queue."""
