"""The text of a reply while it streams, kept where every server process can read it.

A page refreshed mid-reply reconnects to whichever server process; the tokens streamed
before it reconnected were sent to a socket that no longer exists. So the producing
process keeps the text so far in Django's cache (Redis when REDIS_URL is set) under the
session, and a reconnecting client is sent that snapshot, then the rest as it streams.

Each chunk event gets the `offset` of its first character in the reply, so a client (or
consumer) holding a snapshot of length n keeps only the part of a chunk past n, and one
that sees an offset beyond what it has knows it missed a chunk and asks for a snapshot.

A session streams one reply at a time (turns hold the session's lease), so the cache key
is per session and names the reply it holds. The producer appends in its own memory and
writes the whole text on each chunk: one cache write per chunk, no read-modify-write.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from django.core.cache import cache

logger = logging.getLogger(__name__)

STREAM_TTL = 600  # seconds; refreshed on every chunk, so only an abandoned stream expires
_MAX_OPEN = 512  # streams this process remembers; a turn that died mid-stream is forgotten

_lock = threading.Lock()
_open: OrderedDict[tuple[int, int], str] = OrderedDict()


def _key(session_id: int) -> str:
    return f"qorven:stream:{session_id}"


def stream_chunk(session_id: int, reply_to: int, delta: str) -> int:
    """Record `delta` as the next piece of the reply to `reply_to`; return its offset."""
    with _lock:
        text = _open.pop((session_id, reply_to), "")
        _open[(session_id, reply_to)] = text + delta
        while len(_open) > _MAX_OPEN:
            _open.popitem(last=False)
    cache.set(_key(session_id), {"reply_to": reply_to, "text": text + delta}, STREAM_TTL)
    return len(text)


def stream_restart(session_id: int, reply_to: int) -> None:
    """The reply starts again from nothing (its last try failed after streaming some)."""
    with _lock:
        _open[(session_id, reply_to)] = ""
    current = cache.get(_key(session_id))
    if current and current.get("reply_to") == reply_to:
        cache.delete(_key(session_id))


def stream_end(session_id: int, reply_to: int) -> None:
    """The reply is stored: forget its stream."""
    with _lock:
        _open.pop((session_id, reply_to), None)
    current = cache.get(_key(session_id))
    if current and current.get("reply_to") == reply_to:
        cache.delete(_key(session_id))


def stream_snapshot(session_id: int) -> dict[str, Any] | None:
    """`{"reply_to", "text"}` of the reply streaming on the session, or None."""
    value = cache.get(_key(session_id))
    return value if isinstance(value, dict) and value.get("text") else None


def stream_track(session_id: int, event: dict[str, Any]) -> dict[str, Any]:
    """Keep the stream buffer in step with a live event about to be broadcast; chunk
    events come back with their offset. Never raises: the cache being down costs only
    the refresh-mid-reply snapshot."""
    kind = event.get("type")
    try:
        if kind == "message.chunk":
            return {**event, "offset": stream_chunk(session_id, int(event["reply_to"]), str(event["delta"]))}
        if kind == "message.done":
            stream_end(session_id, int(event["reply_to"]))
        if kind == "message.restart":
            stream_restart(session_id, int(event["reply_to"]))
    except Exception:
        logger.warning("could not keep the stream buffer of session %s", session_id, exc_info=True)
    return event
