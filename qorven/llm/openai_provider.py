"""Any OpenAI-compatible server through the official `openai` SDK (async client)."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import openai

from .errors import ContextLengthExceeded, ProviderUnavailable
from .provider import Completion, TokenCallback, ToolCall, Usage

logger = logging.getLogger(__name__)

_CONTEXT_MARKERS = ("context_length_exceeded", "maximum context length", "context length", "too many tokens")


class OpenAIProvider:
    """Streams a chat completion. Transient failures (429, 5xx, timeouts, connection
    errors) are retried by the SDK with backoff, honouring Retry-After; the whole call is
    bounded by `deadline` seconds."""

    def __init__(
        self, *, base_url: str, api_key: str, model: str, timeout: float, max_retries: int, deadline: float
    ) -> None:
        self.model = model
        self.base_url = base_url
        self._deadline = deadline
        self._client_args = dict(
            base_url=base_url or None, api_key=api_key or "not-needed", timeout=timeout, max_retries=max_retries
        )

    async def complete(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        on_token: TokenCallback | None = None,
    ) -> Completion:
        try:
            return await asyncio.wait_for(self._complete(messages, tools, on_token), timeout=self._deadline)
        except TimeoutError:
            raise ProviderUnavailable(f"the model did not answer within {self._deadline:.0f}s") from None

    async def _complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, on_token: TokenCallback | None
    ) -> Completion:
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True,
                                  "stream_options": {"include_usage": True}}
        if tools:
            kwargs["tools"] = tools
        async with openai.AsyncOpenAI(**self._client_args) as client:
            try:
                stream = await client.chat.completions.create(**kwargs)
                return await self._collect(stream, on_token)
            except openai.BadRequestError as exc:
                if _is_context_error(exc):
                    raise ContextLengthExceeded(str(exc)) from exc
                raise ProviderUnavailable(f"the model refused the request: {_short(exc)}") from exc
            except openai.APIStatusError as exc:
                raise ProviderUnavailable(f"the model server answered {exc.status_code}: {_short(exc)}") from exc
            except (openai.APIConnectionError, openai.APITimeoutError) as exc:
                raise ProviderUnavailable(f"could not reach the model server: {_short(exc)}") from exc

    async def _collect(self, stream: Any, on_token: TokenCallback | None) -> Completion:
        parts: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        usage: Usage | None = None
        model = self.model
        async for chunk in stream:
            model = getattr(chunk, "model", None) or model
            if getattr(chunk, "usage", None):
                usage = Usage(chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
            for choice in chunk.choices or []:
                delta = choice.delta
                if delta is None:
                    continue
                if delta.content:
                    parts.append(delta.content)
                    if on_token is not None:
                        await on_token(delta.content)
                for tc in delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    if tc.id:
                        slot["id"] = tc.id
                    if tc.function is not None:
                        slot["name"] += tc.function.name or ""
                        slot["arguments"] += tc.function.arguments or ""
        tool_calls = [
            ToolCall(id=c["id"] or f"call_{i}", name=c["name"], arguments=c["arguments"])
            for i, c in sorted(calls.items())
        ]
        return Completion(content="".join(parts), tool_calls=tool_calls, usage=usage, model=model)


def _is_context_error(exc: openai.APIStatusError) -> bool:
    text = f"{getattr(exc, 'code', '') or ''} {exc.message}".lower()
    return any(marker in text for marker in _CONTEXT_MARKERS)


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
