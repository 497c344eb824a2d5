"""Any OpenAI-compatible server through the official `openai` SDK.

Synchronous, on one long-lived `openai.OpenAI` client per (base URL, key, timeout,
retries): its HTTP connection pool is reused by every call on every worker thread (a
streamed answer is read to the end of its body, so its connection goes back to the pool:
`_Stream`), and nothing builds an event loop, a thread or a client per call.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import openai
from openai.types.chat import ChatCompletion

from qorven.runtime.route_slots import SlotTimeout, route_slot

from .errors import ContextLengthExceeded, ModelError, ModelRefused, ProviderUnavailable
from .provider import Completion, TokenCallback, ToolCall, Usage

if TYPE_CHECKING:
    from openai._streaming import ServerSentEvent

logger = logging.getLogger(__name__)

_CONTEXT_MARKERS = ("context_length_exceeded", "maximum context length", "context length", "too many tokens")
_QUOTA_CODES = ("insufficient_quota", "billing_hard_limit_reached")

_clients: dict[tuple[str, str, float, int], openai.OpenAI] = {}
_clients_lock = threading.Lock()


def client_for(*, base_url: str, api_key: str, timeout: float, max_retries: int) -> openai.OpenAI:
    """The process's one client for this route."""
    key = (base_url, api_key, timeout, max_retries)
    client = _clients.get(key)
    if client is None:
        with _clients_lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = openai.OpenAI(
                    base_url=base_url or None, api_key=api_key or "not-needed", timeout=timeout,
                    max_retries=max_retries,
                )
    return client


class _Stream(openai.Stream[object]):
    """The SDK's stream of a chat completion, read to the end of the response's body.

    The SDK stops reading at the `[DONE]` event and closes the response; a response closed
    before its body has ended takes its connection with it, so every streamed answer made
    the next model call open a new connection — to a remote provider, a TCP and a TLS
    handshake each time. Nothing but the body's end follows `[DONE]`: it is read, and the
    connection goes back to the client's pool. A server that fails to end the body there
    costs its connection, not the answer (the error of that read is dropped)."""

    def _iter_events(self) -> Iterator[ServerSentEvent]:
        events = super()._iter_events()
        for sse in events:
            if sse.data.startswith("[DONE]"):
                try:
                    for _after in events:
                        pass
                except openai.APIError:
                    pass
            yield sse


class OpenAIProvider:
    """Streams a chat completion. Transient failures (429, 5xx, timeouts, connection
    errors) are retried by the SDK with backoff, honouring Retry-After; streaming stops at
    `deadline` seconds. Every failure comes out as one of qorven.llm.errors."""

    def __init__(
        self, *, base_url: str, api_key: str, model: str, timeout: float, max_retries: int, deadline: float,
        max_concurrency: int = 0,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self._timeout = timeout
        self._deadline = deadline
        self._cap = max_concurrency
        self._client = client_for(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)

    def complete(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        on_token: TokenCallback | None = None,
    ) -> Completion:
        try:
            # A call past the server's cap waits its turn, at most as long as a call may run.
            with route_slot(base_url=self.base_url, cap=self._cap, wait=self._deadline,
                            lease=self._deadline + self._timeout):
                return self._complete(messages=messages, tools=tools, on_token=on_token)
        except SlotTimeout as exc:
            raise ProviderUnavailable(f"every slot of the model server stayed busy: {exc}", kind="rate_limited",
                                      model=self.model) from None
        except ModelError as exc:
            exc.host = urlsplit(self.base_url).netloc  # for the owners' notice: which server failed
            raise

    def _complete(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        on_token: TokenCallback | None = None,
    ) -> Completion:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True,
                                "stream_options": {"include_usage": True}}
        if tools:
            body["tools"] = tools
        deadline = time.monotonic() + self._deadline
        try:
            # The SDK's documented low-level call rather than `chat.completions.create`: the
            # body is already the API's JSON, and create()'s request transform walks every
            # message of the prompt through its type hints (~40 % of a turn's CPU with a
            # full prompt). Retries, auth, errors and the stream parser are the SDK's own;
            # each chunk comes as the API's JSON (a dict): building a typed chunk object for
            # every token cost more than the rest of reading the stream.
            with self._client.post("/chat/completions", body=body, cast_to=ChatCompletion,
                                   options={"timeout": min(self._timeout, self._deadline)},
                                   stream=True, stream_cls=_Stream) as stream:
                return self._collect(stream, on_token, deadline)
        except ModelError:
            raise
        except openai.APIStatusError as exc:
            raise _classify(exc, self.model) from exc
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            failure = ProviderUnavailable(f"could not reach the model server: {exc}", model=self.model)
            failure.dropped = not isinstance(exc, openai.APITimeoutError)
            raise failure from exc
        except openai.APIError as exc:  # an error event in the middle of a stream
            raise ProviderUnavailable(f"the model server failed mid-answer: {exc}", model=self.model) from exc

    def _collect(self, stream: Any, on_token: TokenCallback | None, deadline: float) -> Completion:
        parts: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        usage: Usage | None = None
        model = self.model
        finish = ""
        for chunk in stream:
            if time.monotonic() > deadline:
                raise ProviderUnavailable(f"the model did not finish within {self._deadline:.0f}s", model=model)
            if not isinstance(chunk, dict):
                continue
            model = chunk.get("model") or model
            counted = chunk.get("usage")
            if isinstance(counted, dict):
                usage = Usage(counted.get("prompt_tokens") or 0, counted.get("completion_tokens") or 0)
            for choice in chunk.get("choices") or []:
                finish = choice.get("finish_reason") or finish
                delta = choice.get("delta")
                if not isinstance(delta, dict):
                    continue
                text = delta.get("content")
                if text:
                    parts.append(text)
                    if on_token is not None:
                        on_token(text)
                for tc in delta.get("tool_calls") or []:
                    slot = calls.setdefault(tc.get("index", 0), {"id": "", "name": "", "arguments": ""})
                    if tc.get("id"):
                        slot["id"] = tc["id"]
                    function = tc.get("function")
                    if isinstance(function, dict):
                        slot["name"] += function.get("name") or ""
                        slot["arguments"] += function.get("arguments") or ""
        if finish == "content_filter" and not parts and not calls:
            raise ModelRefused("the answer was withheld by the provider's content filter", model=model)
        tool_calls = [
            ToolCall(id=c["id"] or f"call_{i}", name=c["name"], arguments=c["arguments"])
            for i, c in sorted(calls.items())
        ]
        return Completion(content="".join(parts), tool_calls=tool_calls, usage=usage, model=model)


_AUDIO_NAMES = {"audio/ogg": "voice.ogg", "audio/mpeg": "voice.mp3", "audio/mp4": "voice.m4a", "audio/wav": "voice.wav",
                "audio/webm": "voice.webm", "audio/aac": "voice.aac", "audio/amr": "voice.amr"}


def transcription_create(
    *, base_url: str, api_key: str, model: str, audio: bytes, mime_type: str, timeout: float, max_retries: int
) -> str:
    """One transcription (OpenAI's /audio/transcriptions, which OpenAI-compatible speech
    servers mirror) on the route's shared client. Failures come out as qorven.llm.errors."""
    client = client_for(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
    name = _AUDIO_NAMES.get(mime_type.split(";")[0].strip(), "voice.ogg")
    try:
        result = client.audio.transcriptions.create(model=model, file=(name, audio, mime_type))
    except openai.APIStatusError as exc:
        raise _classify(exc, model) from None
    except (openai.APITimeoutError, openai.APIConnectionError) as exc:
        raise ProviderUnavailable(f"{type(exc).__name__}: {exc}", model=model) from None
    text = getattr(result, "text", None)
    return text.strip() if isinstance(text, str) else str(result).strip()


def _classify(exc: openai.APIStatusError, model: str) -> ModelError:
    status = exc.status_code
    code = str(getattr(exc, "code", "") or "")
    detail = f"{status}: {exc.message}"
    if status == 429 and code not in _QUOTA_CODES:
        return ProviderUnavailable(detail, kind="rate_limited", status=status, model=model,
                                   retry_after=_retry_after(exc))
    if status >= 500 or status in (408, 409):
        return ProviderUnavailable(detail, status=status, model=model, retry_after=_retry_after(exc))
    if status == 400 and _is_context_error(exc):
        return ContextLengthExceeded(detail, status=status, model=model)
    if status in (402, 429):
        return ModelRefused(detail, kind="quota", status=status, model=model)
    if status in (401, 403, 404):
        return ModelRefused(detail, kind="misconfigured", status=status, model=model)
    return ModelRefused(detail, status=status, model=model)


def _retry_after(exc: openai.APIStatusError) -> float | None:
    headers = exc.response.headers if exc.response is not None else {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return max(float(value) * scale, 0.0)
            except ValueError:
                continue
    return None


def _is_context_error(exc: openai.APIStatusError) -> bool:
    text = f"{getattr(exc, 'code', '') or ''} {exc.message}".lower()
    return any(marker in text for marker in _CONTEXT_MARKERS)
