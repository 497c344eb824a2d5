"""The live sender (qorven.runtime.publisher): events leave in order without each one
paying for a new cache connection."""
from __future__ import annotations

import pytest
import redis
from django.conf import settings

from qorven.runtime.publisher import broadcast_flush, broadcast_soon
from qorven.runtime.streams import stream_snapshot

pytestmark = pytest.mark.skipif(
    "redis" not in settings.CACHES["default"]["BACKEND"].lower(),
    reason="needs the Redis cache (REDIS_URL, as in CI's second pass); the embedded default's is in this process",
)

SESSION = 987_654  # a session id no other test streams on


def test_streamed_chunks_share_one_cache_connection(monkeypatch):
    """Each chunk is written to the stream buffer (the cache) before it is broadcast. The
    sender used to make a new cache client per batch of events, opening a Redis
    connection before every chunk of a slowly streamed reply could leave."""
    broadcast_soon(SESSION, {"type": "message.chunk", "reply_to": 1, "delta": "warm "})  # the thread, its loop
    assert broadcast_flush()
    opened = []
    connect = redis.connection.AbstractConnection.connect

    def counted(self, *args, **kwargs):
        if self._sock is None:
            opened.append(self)
        return connect(self, *args, **kwargs)

    monkeypatch.setattr(redis.connection.AbstractConnection, "connect", counted)
    for i in range(20):
        broadcast_soon(SESSION, {"type": "message.chunk", "reply_to": 1, "delta": f"w{i} "})
        assert broadcast_flush()  # one event a batch, as when a model streams at its own pace

    assert stream_snapshot(SESSION)["text"] == "warm " + "".join(f"w{i} " for i in range(20))
    assert len(opened) <= 1  # the snapshot's read above may open this thread's own
    broadcast_soon(SESSION, {"type": "message.done", "reply_to": 1, "seq": 2})
    assert broadcast_flush()
