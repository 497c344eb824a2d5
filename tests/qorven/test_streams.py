"""The stream buffer (qorven.runtime.streams): what a page reconnecting mid-reply is sent,
and what keeping it costs per chunk, on the embedded default and on Redis alike."""
from __future__ import annotations

import pickle
import types

import pytest
import redis
from django.conf import settings
from django.core.cache.backends import locmem

from qorven.runtime.streams import stream_end, stream_restart, stream_snapshot, stream_track

SESSION = 987_321  # a session id no other test streams on


def _chunk(reply_to: int, delta: str, session: int = SESSION) -> dict:
    return stream_track(session, {"type": "message.chunk", "reply_to": reply_to, "delta": delta})


@pytest.fixture
def written(monkeypatch):
    """Bytes handed to the cache: pickled into the in-process cache, or sent to Redis."""
    sent = [0]
    send = redis.connection.AbstractConnection.send_packed_command

    def counted_send(self, command, *args, **kwargs):
        sent[0] += sum(len(part) for part in ([command] if isinstance(command, (bytes, str)) else command))
        return send(self, command, *args, **kwargs)

    def counted_dumps(value, *args, **kwargs):
        data = pickle.dumps(value, *args, **kwargs)
        sent[0] += len(data)
        return data

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted_send)
    monkeypatch.setattr(locmem, "pickle", types.SimpleNamespace(dumps=counted_dumps, loads=pickle.loads,
                                                                HIGHEST_PROTOCOL=pickle.HIGHEST_PROTOCOL))
    return sent


def test_a_long_reply_costs_the_cache_in_proportion_to_its_text_not_its_square(written):
    """Every chunk rewrote the whole text so far: a 200 KB reply was gigabytes of Redis
    writes, and the live events queued behind them reached the page seconds late."""
    deltas = [f"word{i:05d} " * 5 for i in range(1000)]  # 50 characters each, 50 KB in all
    offsets = [_chunk(1, delta)["offset"] for delta in deltas]

    text = "".join(deltas)
    assert offsets == [50 * i for i in range(1000)]
    assert stream_snapshot(SESSION) == {"reply_to": 1, "text": text}
    # a command's few bytes per chunk, and the text once: it was ~500 times the text
    assert written[0] < 2 * len(text) + 300 * len(deltas)
    stream_end(SESSION, 1)


def test_the_snapshot_is_the_text_so_far_exactly_and_ends_with_the_reply():
    for delta in ["Once ", "upon ", "a time — ", "☃ and 🎉"]:
        _chunk(7, delta)
    assert stream_snapshot(SESSION) == {"reply_to": 7, "text": "Once upon a time — ☃ and 🎉"}
    assert _chunk(7, ".")["offset"] == len("Once upon a time — ☃ and 🎉")
    stream_end(SESSION, 7)
    assert stream_snapshot(SESSION) is None


def test_a_restarted_reply_snapshots_only_its_new_text():
    _chunk(8, "Partial from the first try")
    stream_restart(SESSION, 8)
    assert stream_snapshot(SESSION) is None
    assert _chunk(8, "The whole")["offset"] == 0
    assert _chunk(8, " answer.")["offset"] == len("The whole")
    assert stream_snapshot(SESSION) == {"reply_to": 8, "text": "The whole answer."}
    stream_end(SESSION, 8)


@pytest.mark.skipif(not settings.REDIS_URL, reason="the text outlives its producer only in Redis")
def test_a_new_tries_first_chunk_over_a_dead_tries_text_tells_clients_to_start_afresh():
    """A worker killed mid-reply left its text in Redis; the try that answers again (in
    another process) streamed over it at offset 0, and pages holding the dead text kept it
    as the start of the new reply."""
    from qorven.runtime.streams import streams_forget

    _chunk(12, "The dead try's ")
    _chunk(12, "words")
    streams_forget()  # the process that streamed them is gone
    first = _chunk(12, "Fresh")
    assert first["offset"] == 0 and first["restart"] is True
    assert "restart" not in _chunk(12, " text")
    assert stream_snapshot(SESSION) == {"reply_to": 12, "text": "Fresh text"}
    stream_end(SESSION, 12)
    assert "restart" not in _chunk(12, "Regenerated after the end")  # nothing left behind: not a restart
    stream_end(SESSION, 12)


def test_the_next_reply_replaces_the_last_ones_snapshot_and_an_old_end_leaves_it():
    _chunk(9, "first reply")
    _chunk(11, "second")
    assert stream_snapshot(SESSION) == {"reply_to": 11, "text": "second"}
    stream_end(SESSION, 9)  # a late end of the earlier reply
    assert stream_snapshot(SESSION) == {"reply_to": 11, "text": "second"}
    stream_end(SESSION, 11)
    assert stream_snapshot(SESSION) is None


@pytest.mark.skipif("redis" not in settings.CACHES["default"]["BACKEND"].lower(),
                    reason="the embedded default keeps the text in the producer's memory, with nothing to lose")
def test_a_chunk_whose_write_was_lost_does_not_leave_a_hole_in_the_snapshot(monkeypatch):
    _chunk(12, "Once ")
    execute = redis.client.Pipeline.execute
    monkeypatch.setattr(redis.client.Pipeline, "execute", lambda self, *a, **k: (_ for _ in ()).throw(
        redis.ConnectionError("gone")))
    assert _chunk(12, "upon ")["offset"] == 5  # the event still leaves, counted
    monkeypatch.setattr(redis.client.Pipeline, "execute", execute)
    _chunk(12, "a time")
    assert stream_snapshot(SESSION) == {"reply_to": 12, "text": "Once upon a time"}
    stream_end(SESSION, 12)


def test_sessions_stream_apart():
    _chunk(1, "to alice", session=SESSION + 1)
    _chunk(1, "to bob", session=SESSION + 2)
    assert stream_snapshot(SESSION + 1)["text"] == "to alice"
    assert stream_snapshot(SESSION + 2)["text"] == "to bob"
    stream_end(SESSION + 1, 1)
    stream_end(SESSION + 2, 1)


@pytest.mark.skipif("redis" not in settings.CACHES["default"]["BACKEND"].lower(),
                    reason="the embedded default keeps the text in the producer's memory")
def test_a_reply_s_end_forgets_its_stored_text_in_one_round_trip(monkeypatch):
    """Every reply ends its stream: a GET of the reply the keys hold, then their DEL, were
    two round trips to Redis, and the reply's stop flag's DEL a third; the look and the
    deletes are now one command."""
    from qorven.agent.stop import StopWatch, turn_stop_request

    _chunk(13, "warm")
    stream_end(SESSION, 13)  # the script is loaded on the first end (a second round trip, once)
    _chunk(14, "Hello")
    commands = []
    send = redis.connection.AbstractConnection.send_packed_command
    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command",
                        lambda self, command, *a, **k: (commands.append(command), send(self, command, *a, **k))[1])
    turn_stop_request(session_id=SESSION, reply_to=14)  # a Stop that came too late
    commands.clear()
    stream_end(SESSION, 14)
    assert len(commands) == 1  # the stream forgotten and the stop flag cleared: its DEL was one more
    monkeypatch.undo()
    assert stream_snapshot(SESSION) is None
    StopWatch(session_id=SESSION, reply_to=14).check()  # cleared: no TurnStopped


def test_a_reply_s_end_clears_a_stop_that_came_too_late_and_a_restart_keeps_it():
    """A Stop asked for after the turn's last look at it is cleared as the reply ends (its
    message.done sent), so it cannot stop a later answer to the same message (after
    /retry); a try that starts again keeps it, to be noticed. Cleared in the script that
    forgets the stream on Redis (qorven.runtime.streams._FORGET), not in a DEL of its own."""
    from qorven.agent.stop import StopWatch, TurnStopped, turn_stop_request

    _chunk(15, "Hel")
    turn_stop_request(session_id=SESSION, reply_to=15)
    stream_track(SESSION, {"type": "message.restart", "reply_to": 15})
    with pytest.raises(TurnStopped):
        StopWatch(session_id=SESSION, reply_to=15).check()
    _chunk(16, "Hello")
    turn_stop_request(session_id=SESSION, reply_to=16)
    stream_track(SESSION, {"type": "message.done", "reply_to": 16, "seq": 17})
    StopWatch(session_id=SESSION, reply_to=16).check()  # nothing to stop: no TurnStopped
    assert stream_snapshot(SESSION) is None
