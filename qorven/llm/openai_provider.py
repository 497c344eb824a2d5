"""Any OpenAI-compatible server through the official `openai` SDK.

Synchronous, on one long-lived `openai.OpenAI` client per (base URL, key, timeout,
retries): its HTTP connection pool is reused by every call on every worker thread (a
streamed answer is read to the end of its body, so its connection goes back to the pool:
qorven.llm.answer_stream), and nothing builds an event loop, a thread or a client per
call. The client of a route stored in the database connects only where the address policy allows
(qorven.runtime.outbound_transport); one refused there fails as a refused route.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from collections import OrderedDict
from typing import Any
from urllib.parse import urlsplit

import openai
from openai.types.chat import ChatCompletion

from qorven.runtime.outbound import address_refusal
from qorven.runtime.route_slots import SlotTimeout, SlotWait, route_slot, route_slot_leave, route_slot_look

from .answer_stream import AnswerStream, answer_read
from .errors import ContextLengthExceeded, ModelError, ModelRefused, ProviderUnavailable, SlotsBusy, WaitingForSlot
from .provider import Completion, TokenCallback

logger = logging.getLogger(__name__)

_CONTEXT_MARKERS = ("context_length_exceeded", "maximum context length", "context length", "too many tokens",
                    "context size", "exceed_context_size")  # the last two: llama.cpp's server
_QUOTA_CODES = ("insufficient_quota", "billing_hard_limit_reached")

# The routes used last, each with its client (and its pool of open connections). Every
# fallback whose key or URL was edited, every tenant gone, left a client behind for the
# life of the process, its connections open; past CLIENTS_KEPT the least recently used
# goes, and closes once the calls still holding it end (the SDK closes it when collected).
CLIENTS_KEPT = 64
_clients: OrderedDict[tuple[str, str, float, int, bool], openai.OpenAI] = OrderedDict()
_clients_lock = threading.Lock()


def client_for(*, base_url: str, api_key: str, timeout: float, max_retries: int,
               guarded: bool = False) -> openai.OpenAI:
    """The process's one client for this route. `guarded`: the base URL came from the
    database, and every connection the client makes (a redirect's included) keeps to the
    address policy with the address it resolved (qorven.runtime.outbound_transport)."""
    key = (base_url, api_key, timeout, max_retries, guarded)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = openai.OpenAI(
                base_url=base_url or None, api_key=api_key or "not-needed", timeout=timeout,
                max_retries=max_retries, http_client=_guarded_http_client() if guarded else None,
            )
            while len(_clients) > CLIENTS_KEPT:
                _clients.popitem(last=False)
        else:
            _clients.move_to_end(key)
    return client


def _guarded_http_client() -> openai.DefaultHttpxClient:
    from qorven.runtime.outbound_transport import guarded_transport

    # The SDK's own client and defaults (redirects followed, its limits), on a guarded transport.
    return openai.DefaultHttpxClient(transport=guarded_transport(limits=openai.DEFAULT_CONNECTION_LIMITS))


def _refused_route(exc: openai.APIError, model: str) -> ModelRefused | None:
    """A connection the address policy refused, as the route the check before use refuses."""
    refusal = address_refusal(exc)
    if refusal is None:
        return None
    return ModelRefused(f"model route refused: {refusal}", kind="misconfigured", model=model)


class OpenAIProvider:
    """Streams a chat completion. Transient failures (429, 5xx, timeouts, connection
    errors) before any of the answer came are retried here with a short backoff, honouring
    a Retry-After up to BACKOFF_MOST (a longer one is the turn's to wait, on the worker's
    timer); streaming stops at `deadline` seconds. Every failure comes out as one of
    qorven.llm.errors."""

    def __init__(
        self, *, base_url: str, api_key: str, model: str, timeout: float, max_retries: int, deadline: float,
        max_concurrency: int = 0, max_chars: int = 0, max_tool_calls: int = 0, guarded: bool = False,
    ) -> None:
        self.model = model
        # The longest reply text, and the longest tool call (name and arguments), read (0: no
        # bound); past either, or past `max_tool_calls` calls, the stream is let go.
        self._max_chars = max_chars
        self._max_tool_calls = max_tool_calls
        self.base_url = base_url
        self._timeout = timeout
        self._deadline = deadline
        self._retries = max_retries
        self._cap = max_concurrency
        # Retried here, not by the SDK: its retries (each with the full timeout) knew
        # nothing of the call's time limit.
        self._client = client_for(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0, guarded=guarded)

    def complete(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        on_token: TokenCallback | None = None,
    ) -> Completion:
        try:
            # A call past the server's cap waits its turn, at most as long as a call may run
            # (from its first look): a worker's task on the worker's timer (WaitingForSlot).
            with route_slot(base_url=self.base_url, cap=self._cap, wait=self._deadline,
                            lease=self._deadline + self._timeout):
                return self._complete(messages=messages, tools=tools, on_token=on_token)
        except SlotWait as waiting:
            raise self._waiting(waiting) from None
        except SlotTimeout as exc:
            raise SlotsBusy(f"every slot of the model server stayed busy: {exc}", model=self.model) from None
        except ModelError as exc:
            # For the owners' notice and doctor: which server failed, never the credentials a
            # stored URL may carry before its host.
            exc.host = urlsplit(self.base_url).netloc.rpartition("@")[2]
            raise

    def slot_look(self) -> None:
        """Inside a slot ticket: WaitingForSlot when a call made now would find no slot
        of this server free for it, its place in the queue kept as by the call."""
        try:
            route_slot_look(base_url=self.base_url, cap=self._cap, wait=self._deadline)
        except SlotWait as waiting:
            raise self._waiting(waiting) from None

    def _waiting(self, waiting: SlotWait) -> WaitingForSlot:
        exc = WaitingForSlot("every slot of the model server is taken", model=self.model,
                             retry_after=waiting.after)
        exc.base_url, exc.cap = self.base_url, self._cap
        return exc

    def slot_leave(self) -> None:
        """Inside a slot ticket: give up its place in this server's queue, if it has one."""
        route_slot_leave(base_url=self.base_url, cap=self._cap)

    def _complete(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        on_token: TokenCallback | None = None,
    ) -> Completion:
        """The call, and up to `max_retries` more when it fails transiently before any of
        the answer came (Retry-After honoured), all within the time limit."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True,
                                "stream_options": {"include_usage": True}}
        if tools:
            body["tools"] = tools
        deadline = time.monotonic() + self._deadline
        for attempt in range(self._retries + 1):
            answering = False
            try:
                # The SDK's documented low-level call rather than `chat.completions.create`:
                # the body is already the API's JSON, and create()'s request transform walks
                # every message of the prompt through its type hints (~40 % of a turn's CPU
                # with a full prompt). Auth, errors and the stream parser are the SDK's own;
                # each chunk comes as the API's JSON (a dict): building a typed chunk object
                # for every token cost more than the rest of reading the stream.
                left = max(deadline - time.monotonic(), 0.001)
                with self._client.post("/chat/completions", body=body, cast_to=ChatCompletion,
                                       options={"timeout": min(self._timeout, left)},
                                       stream=True, stream_cls=AnswerStream) as stream:
                    answering = True
                    return answer_read(stream, model=self.model, deadline=deadline, seconds=self._deadline,
                                       max_chars=self._max_chars, max_tool_calls=self._max_tool_calls,
                                       on_token=on_token, route=f"{self.base_url} {self.model}")
            except ModelError as exc:
                failure = exc
            except openai.APIStatusError as exc:
                failure = _classify(exc, self.model)
            except (openai.APIConnectionError, openai.APITimeoutError) as exc:
                refused = _refused_route(exc, self.model)
                if refused is not None:
                    raise refused from None
                failure = ProviderUnavailable(f"could not reach the model server: {exc}", model=self.model)
                failure.dropped = not isinstance(exc, openai.APITimeoutError)
            except openai.APIError as exc:  # an error event in the middle of a stream
                failure = ProviderUnavailable(f"the model server failed mid-answer: {exc}", model=self.model)
            wait = _retry_wait(attempt, failure.retry_after)
            if (answering or not failure.transient or attempt == self._retries or wait is None
                    or time.monotonic() + wait >= deadline):
                raise failure
            logger.info("model call to %s failed (%s); trying again in %.1fs", self.model, failure.summary(), wait)
            time.sleep(wait)
        raise AssertionError("unreachable")  # the last attempt returns or raises

# The longest wait slept in the call, on the worker's thread, before trying again.
BACKOFF_MOST = 8.0


def _retry_wait(attempt: int, retry_after: float | None) -> float | None:
    """Seconds before trying again after `attempt` (0 is the first) failed: the server's
    Retry-After up to BACKOFF_MOST, else 0.5 s doubling to BACKOFF_MOST, with some jitter.
    None for a longer Retry-After: the call ends, and the turn comes back after it on the
    worker's timer (qorven.agent.turn_answer) — slept here, a rate-limited model held a
    worker slot for minutes, and every other tenant's turn waited behind it."""
    if retry_after is not None:
        return retry_after if retry_after <= BACKOFF_MOST else None
    return min(0.5 * 2**attempt, BACKOFF_MOST) * (1 - 0.25 * random.random())


_AUDIO_NAMES = {"audio/ogg": "voice.ogg", "audio/mpeg": "voice.mp3", "audio/mp4": "voice.m4a", "audio/wav": "voice.wav",
                "audio/webm": "voice.webm", "audio/aac": "voice.aac", "audio/amr": "voice.amr"}


def transcription_create(
    *, base_url: str, api_key: str, model: str, audio: bytes, mime_type: str, timeout: float, max_retries: int,
    guarded: bool = False,
) -> str:
    """One transcription (OpenAI's /audio/transcriptions, which OpenAI-compatible speech
    servers mirror) on the route's shared client, tried up to `max_retries` more times on
    a transient failure, as a chat completion is (a Retry-After past BACKOFF_MOST is the
    voice task's to wait, on the worker's timer). Failures come out as qorven.llm.errors."""
    # Retried here, not by the SDK: its retries slept out a Retry-After of up to a minute
    # on the worker's thread, each time.
    client = client_for(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0, guarded=guarded)
    name = _AUDIO_NAMES.get(mime_type.split(";")[0].strip(), "voice.ogg")
    for attempt in range(max_retries + 1):
        try:
            result = client.audio.transcriptions.create(model=model, file=(name, audio, mime_type))
            break
        except openai.APIStatusError as exc:
            failure = _classify(exc, model)
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            failure = _refused_route(exc, model) or ProviderUnavailable(f"{type(exc).__name__}: {exc}", model=model)
        wait = _retry_wait(attempt, failure.retry_after)
        if not failure.transient or attempt == max_retries or wait is None:
            raise failure from None
        logger.info("transcription by %s failed (%s); trying again in %.1fs", model, failure.summary(), wait)
        time.sleep(wait)
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
