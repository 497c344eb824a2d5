"""A message's turn while the cache's Redis hangs (a server of the test's own, paused:
its connections are still taken, nothing is answered): the first cache call to wait out
QORVEN_REDIS_TIMEOUT has the process take the cache as away for a short rest
(qorven.runtime.redis_rest.CACHE_REST), so the turn's other cache calls — the stop flag,
the route's slot, the session's waiter marker, the stream buffer… — take their away path
at once instead of waiting out the timeout each. The calls that waited are counted as
the connections the paused server took: the clients' connections are closed by the server
before it pauses, so each call reaching it opens one (and one that timed out drops it).

Before, each waited in turn: three calls waited in this turn (a read, a write and the
stream buffer's), more with a capped route's slots in Redis."""
from __future__ import annotations

import pytest
import redis

from ..fakes.model_server import reply
from .test_turns import alice_token, ask, timeline  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def _connections_taken(server) -> int:
    """How many connections `server` has taken so far, this one included."""
    with redis.Redis(port=server.port) as own:
        return int(own.info("stats")["total_connections_received"])


def _clients_dropped(server) -> None:
    with redis.Redis(port=server.port) as own:
        own.client_kill_filter(_type="normal", skipme=True)


def test_a_turn_while_the_cache_hangs_waits_out_the_timeout_once_not_at_each_cache_call(
    client, world, alice_token, model_server, drain, hung_redis, monkeypatch  # noqa: F811
):
    # A rest outlasting the turn however loaded the machine (2 s in use): a second call
    # waiting would be one reaching Redis after a rest, not one the rest let through.
    monkeypatch.setattr("qorven.runtime.redis_rest.CACHE_REST", 600.0)
    model_server.default = reply("Answered.")
    ask(client, alice_token, "hello?")
    drain()
    _clients_dropped(hung_redis)
    before = _connections_taken(hung_redis)
    hung_redis.hang()
    try:
        ask(client, alice_token, "still there?")
        drain()
    finally:
        hung_redis.answer()
    waited = _connections_taken(hung_redis) - before - 1  # our own INFO's aside
    assert [(m.role, m.content) for m in timeline(world) if m.role != "system"] == [
        ("user", "hello?"), ("assistant", "Answered."), ("user", "still there?"), ("assistant", "Answered.")]
    assert waited == 1  # the first call; the others found the cache resting
