"""The live layer's Redis connection arguments (settings.LIVE_REDIS_HOST): no socket
timeout, the system's instead.

With a socket timeout, redis-py sends every command through asyncio.wait_for, which on
Python 3.11 drops a cancellation arriving as the send completes, and a cancelled read (a
closing server, a socket's task) then reads on for ever. So nothing of redis-py's bounds a
PUBLISH that Redis never acknowledges: the live sender stops waiting for it after
QORVEN_REDIS_TIMEOUT (qorven.runtime.publisher), but its connection and the task sending
on it stayed, and with the route's packets dropped TCP gave up after its retransmissions,
about 15 minutes. The kernel bounds it here instead:

- TCP_USER_TIMEOUT (Linux): data sent and not acknowledged for LIVE_USER_TIMEOUTS ×
  QORVEN_REDIS_TIMEOUT closes the connection; the send on it fails (a ConnectionError),
  and the next one connects again. It cannot tell a Redis that hangs but whose system
  still acknowledges what it is sent (a process stopped with SIGSTOP, `CLIENT PAUSE`):
  that PUBLISH is held until Redis answers (even one of 64 MB, filling the stopped
  server's buffers: still held after 20 s here).
- TCP keepalive: an idle connection whose peer went without a word (the subscribing one,
  waiting for events) is probed after 30 s, every 10 s; with TCP_USER_TIMEOUT set, the
  first probe unanswered past it closes the connection (about 40 s with the default
  timeout; without it, 3 missed probes: about a minute).

Connecting is bounded by QORVEN_REDIS_TIMEOUT, as for the cache: the options above are set
once connected, and a dropped route otherwise held a new connection for the system's SYN
retries (about 2 minutes). A Redis on a Unix socket (`unix:///path`) is local: none of
the TCP options apply, and redis-py's Unix connection refuses them.
"""
from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlsplit

LIVE_USER_TIMEOUTS = 2  # TCP_USER_TIMEOUT, in QORVEN_REDIS_TIMEOUTs: the sender has let go after one


def live_redis_host(address: str, timeout: float) -> dict[str, Any]:
    """channels_redis' `hosts` entry for the Redis at `address`, with `timeout` the
    QORVEN_REDIS_TIMEOUT (seconds)."""
    if urlsplit(address).scheme == "unix":  # no TCP: redis-py's Unix connection takes none of its options
        return {"address": address, "socket_timeout": None, "socket_connect_timeout": timeout}
    options = {socket.TCP_KEEPIDLE: 30, socket.TCP_KEEPINTVL: 10, socket.TCP_KEEPCNT: 3}
    user_timeout = getattr(socket, "TCP_USER_TIMEOUT", None)  # Linux only
    if user_timeout is not None:
        # redis-py sets each of these at the TCP level, once connected.
        options[user_timeout] = max(1, round(timeout * LIVE_USER_TIMEOUTS * 1000))  # milliseconds
    return {"address": address, "socket_timeout": None, "socket_connect_timeout": timeout,
            "socket_keepalive": True, "socket_keepalive_options": options}
