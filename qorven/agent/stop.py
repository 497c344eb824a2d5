"""Stopping a reply while it is written: the person asks (the chat page's Stop button),
the turn notices between tokens and keeps what was written so far as the answer.

The request is a flag in the cache — shared by every process with Redis, and by the
server and its own worker on the embedded default — checked by the turn at most every
STOP_CHECK seconds, so a streaming reply costs a cache read a fraction of its tokens.
"""
from __future__ import annotations

import time

import redis
from django.core.cache import cache

from qorven.runtime.cache_away import CACHE_RETRY_DELAY, cache_unreachable
from qorven.runtime.streams import stop_key

STOP_TTL = 600  # seconds a request waits to be noticed; a turn that long is finished or dead
STOP_CHECK = 0.2  # seconds between the turn's looks at the flag
STOP_UNREACHABLE_CHECK = 2.0  # ... while the cache cannot be reached (each look waits for a connect to fail)
STOP_UNAVAILABLE = "The reply could not be stopped just now: try again in a moment."
STOP_UNAVAILABLE_CODE = "stop_unavailable"  # its 503's "code": the cache away, told apart from another outage's 503


class StopUnavailable(Exception):
    """The request could not be passed on: the cache is away (Redis down). The reply goes
    on; the person is told so (STOP_UNAVAILABLE) and may press Stop again, in
    `retry_after` seconds (None: not said)."""

    def __init__(self, retry_after: float | None = CACHE_RETRY_DELAY) -> None:
        super().__init__()
        self.retry_after = retry_after


class TurnStopped(Exception):
    """Raised inside the model call when its reply was asked to stop: unwinds the stream
    (closing it, so the model stops writing too) up to the turn."""


def _key(session_id: int, reply_to: int) -> str:
    # Cleared with the reply's stream as its message.done is sent (qorven.runtime.streams.stream_end).
    return stop_key(session_id, reply_to)


def turn_stop_request(*, session_id: int, reply_to: int) -> None:
    """Ask the turn answering message `reply_to` of the session to stop where it is.
    StopUnavailable when the cache cannot be reached."""
    try:
        cache.set(_key(session_id, reply_to), 1, STOP_TTL)
    except Exception as exc:
        if cache_unreachable(exc):
            raise StopUnavailable() from exc
        raise


class StopWatch:
    """A turn's look at its stop flag, no more often than STOP_CHECK."""

    def __init__(self, *, session_id: int, reply_to: int) -> None:
        self.key = _key(session_id, reply_to)
        self._next = 0.0  # the first look is at once: a request may have come while the turn waited

    def check(self) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + STOP_CHECK
        try:
            asked = cache.get(self.key)
            if asked:
                cache.delete(self.key)
        except redis.RedisError:
            # Redis is away: a reply the model and the database can finish is not given up
            # for it (a Stop asked for is seen once Redis answers again).
            self._next = now + STOP_UNREACHABLE_CHECK
            return
        if asked:
            raise TurnStopped()
