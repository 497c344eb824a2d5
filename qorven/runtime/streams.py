"""The text of a reply while it streams, kept where every server process can read it.

A page refreshed mid-reply reconnects to whichever server process; the tokens streamed
before it reconnected were sent to a socket that no longer exists. So the text so far is
kept under the session, and a reconnecting client is sent that snapshot, then the rest
as it streams.

Each chunk event gets the `offset` of its first character in the reply, so a client (or
consumer) holding a snapshot of length n keeps only the part of a chunk past n, and one
that sees an offset beyond what it has knows it missed a chunk and asks for a snapshot.

A chunk costs what it holds, not the reply so far (a reply of thousands of chunks
rewritten whole on each was gigabytes of cache writes, and the live events waited
behind them):

- With Redis (REDIS_URL, the cache's server), the producer APPENDs each chunk to a string
  beside a key naming the reply it holds, in one round trip. APPEND answers the new
  length; when that is not the producer's own count (a write was lost, or another reply
  took the key), the producer writes its text whole once, so the snapshot stays exact.
- On the embedded default the producer and every socket are one process, so the
  snapshot is read from the producer's own memory and nothing goes through the cache.

A session streams one reply at a time (turns hold the session's lease): the snapshot is
of the reply whose chunk came last.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache

from qorven.runtime.cache_away import cache_or
from qorven.runtime.redis_client import shared_redis
from qorven.runtime.repeated_failure import RepeatedFailure

logger = logging.getLogger(__name__)

STREAM_TTL = 600  # seconds; refreshed on every chunk, so only an abandoned stream expires
_MAX_OPEN = 512  # streams this process remembers; a turn that died mid-stream is forgotten


@dataclass
class _Stream:
    parts: list[str] = field(default_factory=list)
    chars: int = 0  # what offsets count
    size: int = 0  # its UTF-8 bytes: what Redis counts
    touched: float = field(default_factory=time.monotonic)

    def text(self) -> str:
        if len(self.parts) > 1:
            self.parts[:] = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""


_lock = threading.Lock()
_open: OrderedDict[tuple[int, int], _Stream] = OrderedDict()  # (session, reply_to) → its text so far
_latest: OrderedDict[int, int] = OrderedDict()  # session → the reply whose chunk came last


# A chunk whose write failed is not written again: the next chunk written finds the stored
# text short and writes it whole. A Redis that hangs costs QORVEN_REDIS_TIMEOUT a try, and
# the live sender writes a chunk before it leaves; after one write timed out, the writes of
# the next CACHE_REST seconds are refused at once (qorven.runtime.redis_rest), so chunks
# still leave at the model's pace.
_buffer_failures = RepeatedFailure(logger, "could not keep the stream buffer")
_snapshot_failures = RepeatedFailure(logger, "could not read the stream buffer: a reply being written is shown as it is stored")


def _key(session_id: int) -> str:
    return f"qorven:stream:{session_id}"


def _redis(session_id: int) -> tuple[Any, str, str] | None:
    """A Redis client and the keys of a session's stream (the reply it holds, its text),
    named as the cache names its keys, or None on the embedded default. Django's
    RedisCache pickles what it stores, which cannot be appended to: these two keys are
    written raw, through the process's own client, and only here."""
    cache = caches["default"]
    if not isinstance(cache, RedisCache):
        return None
    key = _key(session_id)
    return shared_redis(), cache.make_key(key), cache.make_key(f"{key}:text")


def stream_chunk(session_id: int, reply_to: int, delta: str) -> tuple[int, bool]:
    """Record `delta` as the next piece of the reply to `reply_to`; return its offset, and
    whether it replaces the text an earlier try of the same reply left streaming (a try
    whose worker died mid-reply: its text stayed, and clients hold it)."""
    size = len(delta.encode())
    with _lock:
        stream = _open.pop((session_id, reply_to), None) or _Stream()
        _open[(session_id, reply_to)] = stream
        offset, before = stream.chars, stream.size
        stream.parts.append(delta)
        stream.chars += len(delta)
        stream.size += size
        stream.touched = time.monotonic()
        _latest.pop(session_id, None)
        _latest[session_id] = reply_to
        while len(_open) > _MAX_OPEN:
            _open.popitem(last=False)
        while len(_latest) > _MAX_OPEN:
            _latest.popitem(last=False)
    redis = _redis(session_id)
    replaced = False
    if redis is not None:
        try:
            replaced = _append(redis, stream, reply_to, delta, before, before + size)
        except Exception:  # the next chunk written finds the stored text short and writes it whole
            _buffer_failures.failed(f"session {session_id}")
        else:
            _buffer_failures.succeeded()
    return offset, replaced


def _append(redis: tuple[Any, str, str], stream: _Stream, reply_to: int, delta: str, before: int, after: int) -> bool:
    """Append `delta` to the stored text, which held `before` bytes of `reply_to`'s;
    write the text whole when it did not. True when a try's first chunk found text of
    the same reply stored: another try's, which no longer streams."""
    client, reply_key, text_key = redis
    with client.pipeline(transaction=True) as pipe:
        pipe.getset(reply_key, reply_to)
        pipe.expire(reply_key, STREAM_TTL)
        if before:
            pipe.append(text_key, delta)
        else:
            pipe.strlen(text_key)
            pipe.set(text_key, delta)
        pipe.expire(text_key, STREAM_TTL)
        held, _, written, *_ = pipe.execute()
    if not before:
        return held is not None and int(held) == reply_to and written > 0
    if held is None or int(held) != reply_to or written != after:
        with _lock:
            text = stream.text()
        with client.pipeline(transaction=True) as pipe:
            pipe.set(reply_key, reply_to, ex=STREAM_TTL)
            pipe.set(text_key, text, ex=STREAM_TTL)
            pipe.execute()
    return False


def stream_restart(session_id: int, reply_to: int) -> None:
    """The reply starts again from nothing (its last try failed after streaming some)."""
    with _lock:
        _open[(session_id, reply_to)] = _Stream()
    _forget_stored(session_id, reply_to)


def stop_key(session_id: int, reply_to: int) -> str:
    """The cache key of the flag asking the reply to `reply_to` to stop (qorven.agent.stop),
    named here because the reply's end clears it with the stream (stream_end)."""
    return f"turn-stop:{session_id}:{reply_to}"


def stream_end(session_id: int, reply_to: int) -> None:
    """The reply is stored (or its message failed for good): forget its stream, and clear
    its stop flag, so a Stop that came too late to be noticed cannot stop a later answer
    to the same message (after /retry). Run as its message.done is sent, which follows the
    reply's commit."""
    with _lock:
        _open.pop((session_id, reply_to), None)
        if _latest.get(session_id) == reply_to:
            del _latest[session_id]
    if _redis(session_id) is None:
        caches["default"].delete(stop_key(session_id, reply_to))
    _forget_stored(session_id, reply_to, stop=True)


# The stored stream deleted if it is still `reply_to`'s (another reply may have taken the
# keys since): one round trip, where a GET and then a DEL were two on every reply. At the
# reply's end its stop flag (KEYS[3]) goes in the same round trip: its DEL was one more.
_FORGET = """
if KEYS[3] then redis.call('DEL', KEYS[3]) end
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1], KEYS[2]) end
return 0
"""


def _forget_stored(session_id: int, reply_to: int, *, stop: bool = False) -> None:
    redis = _redis(session_id)
    if redis is None:
        return
    client, reply_key, text_key = redis
    keys = [reply_key, text_key]
    if stop:
        keys.append(caches["default"].make_key(stop_key(session_id, reply_to)))
    client.register_script(_FORGET)(keys=keys, args=[str(reply_to)])


def stream_snapshot(session_id: int) -> dict[str, Any] | None:
    """`{"reply_to", "text"}` of the reply streaming on the session, or None."""
    redis = _redis(session_id)
    if redis is not None:
        client, reply_key, text_key = redis
        # The cache away: no text to show, only that is lost (the page, a socket opening,
        # the terminal go on without it; the stored reply comes as it is written).
        held, text = cache_or((None, None), lambda: client.mget(reply_key, text_key), away=_snapshot_failures)
        if held is None or not text:
            return None
        return {"reply_to": int(held), "text": text.decode()}
    with _lock:
        reply_to = _latest.get(session_id)
        stream = _open.get((session_id, reply_to)) if reply_to is not None else None
        if stream is None or not stream.chars or time.monotonic() - stream.touched > STREAM_TTL:
            return None
        return {"reply_to": reply_to, "text": stream.text()}


def streams_forget() -> None:
    """Forget every stream this process keeps (a process starting has none; for tests)."""
    with _lock:
        _open.clear()
        _latest.clear()


def stream_track(session_id: int, event: dict[str, Any]) -> dict[str, Any]:
    """Keep the stream buffer in step with a live event about to be broadcast; chunk
    events come back with their offset. Never raises: the cache being down costs only
    the refresh-mid-reply snapshot."""
    kind = event.get("type")
    try:
        if kind == "message.chunk":
            offset, replaced = stream_chunk(session_id, int(event["reply_to"]), str(event["delta"]))
            # `restart`: clients drop the dead try's text they hold, as for a message.restart.
            return {**event, "offset": offset, "restart": True} if replaced else {**event, "offset": offset}
        if kind == "message.done":
            stream_end(session_id, int(event["reply_to"]))
        if kind == "message.restart":
            stream_restart(session_id, int(event["reply_to"]))
    except Exception:
        _buffer_failures.failed(f"session {session_id}")
    return event
