"""The live layer's Redis connections keep no socket timeout (qorven.runtime.live_redis says
why): the system closes one whose data goes unacknowledged (TCP_USER_TIMEOUT, derived from
QORVEN_REDIS_TIMEOUT), or whose idle peer is gone (TCP keepalive).

A Redis stopped with SIGSTOP is not such a peer: its system still acknowledges what it is
sent, so a PUBLISH held by it stays held until it goes on (the live sender stops waiting
for it: tests/qorven/test_live_sender_hang.py). What the option bounds is a route whose
packets are dropped, tested here in a network namespace of the test's own."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys

import pytest
from asgiref.sync import async_to_sync
from channels_redis.core import RedisChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.conf import settings

from qorven.runtime.live_redis import live_redis_host

from ..processes import ROOT, redis_of_our_own, wait_for


def _sockets_to(port: int) -> list[socket.socket]:
    """A copy of each of this process's TCP sockets connected to `port` on 127.0.0.1."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            copy = os.dup(int(fd))
        except OSError:  # closed meanwhile
            continue
        try:
            sock = socket.socket(fileno=copy)
        except OSError:  # not a socket
            os.close(copy)
            continue
        try:
            if sock.type == socket.SOCK_STREAM and sock.family == socket.AF_INET and sock.getpeername() == (
                    "127.0.0.1", port):
                found.append(sock)
                continue
        except OSError:  # not connected
            pass
        sock.close()
    return found


@pytest.mark.parametrize("backend", [RedisPubSubChannelLayer, RedisChannelLayer], ids=["pubsub", "lists"])
def test_the_live_layers_connections_are_closed_by_the_system_once_what_they_send_goes_unacknowledged(backend):
    """Read back from the sockets of the live layer the settings make (QORVEN_LIVE_LAYER
    either way), after an event went through it: keepalive on, and TCP_USER_TIMEOUT twice
    QORVEN_REDIS_TIMEOUT. Before, keepalive only: with the route's packets dropped, a
    PUBLISH waited for TCP's retransmissions, about 15 minutes."""
    port, redis = redis_of_our_own()
    layer = backend(hosts=[{**settings.LIVE_REDIS_HOST, "address": f"redis://127.0.0.1:{port}/0"}])

    async def run() -> tuple[dict, list[tuple[int, int]]]:
        channel = await layer.new_channel()
        await layer.group_add("chat.1", channel)
        await layer.group_send("chat.1", {"type": "message.new", "seq": 1})
        async with asyncio.timeout(10):
            event = await layer.receive(channel)
        options = []
        for sock in _sockets_to(port):
            options.append((sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)))
            sock.close()
        await layer.flush()
        return event, options

    try:
        event, options = async_to_sync(run)()
    finally:
        redis.terminate()
        redis.wait(10)
    assert event["seq"] == 1
    assert options, "no connection of the layer's found"
    assert set(options) == {(1, round(settings.QORVEN_REDIS_TIMEOUT * 2000))}, options


def test_publishes_whose_route_to_redis_drops_every_packet_end_with_an_error():
    """In a network namespace of the test's own, the live layer the settings make publishes
    once, then every packet to Redis is dropped and it publishes twice more. The second
    fails once the system closes its connection (its PUBLISH unacknowledged for twice
    QORVEN_REDIS_TIMEOUT, 0.5 s here); the third, connecting anew, once connecting has
    waited QORVEN_REDIS_TIMEOUT. So the live sender's held send, its connection and its
    task end. Before, the second was still held 30 s later (TCP's retransmissions give up
    after about 15 minutes), and a new connection waited for the system's SYN retries
    (about 2 minutes)."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "qorven.settings", "REDIS_URL": "redis://127.0.0.1:6399/0",
           "QORVEN_REDIS_TIMEOUT": "0.5", "QORVEN_LIVE_LAYER": "pubsub", "LIVE_TEST_PORT": "6399",
           "DJANGO_SECRET_KEY": settings.SECRET_KEY}
    env.pop("DATABASE_URL", None)  # the child touches no database
    child = subprocess.Popen(["unshare", "-rn", sys.executable, "-m", "tests.qorven.live_dropped_route"],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)  # its Redis with it
            child.wait(10)
    assert child.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"first": "sent", "second": "ConnectionError",
                                                       "third": "TimeoutError"}, err


def test_the_live_layer_carries_events_over_a_redis_unix_socket(tmp_path):
    """REDIS_URL may name a Unix socket (`unix:///path/to/redis.sock`, the README says):
    the live layer the settings make for it carries an event. Before, every connection it
    made failed (redis-py's Unix socket connection takes no TCP keepalive: a TypeError),
    so no live event reached any page."""
    path = tmp_path / "redis.sock"
    redis = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(path), "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    layer = RedisPubSubChannelLayer(hosts=[live_redis_host(f"unix://{path}", settings.QORVEN_REDIS_TIMEOUT)])

    async def run() -> dict:
        channel = await layer.new_channel()
        await layer.group_add("chat.1", channel)
        await layer.group_send("chat.1", {"type": "message.new", "seq": 1})
        async with asyncio.timeout(10):
            event = await layer.receive(channel)
        await layer.flush()
        return event

    try:
        assert wait_for(lambda: subprocess.run(["redis-cli", "-s", str(path), "ping"], capture_output=True,
                                               text=True).stdout.strip() == "PONG", 10)
        event = async_to_sync(run)()
    finally:
        redis.terminate()
        redis.wait(10)
    assert event["seq"] == 1
