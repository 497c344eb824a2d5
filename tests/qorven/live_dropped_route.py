"""Run in a network namespace of its own (`unshare -rn`, tests/qorven/test_live_redis_connections.py):
a Redis on that namespace's loopback, the live layer the settings make for it, one event
published, then every packet on the loopback dropped (a `blackhole` queue on it: the
route to Redis gone, as a cable pulled or a host's firewall dropping), and two more events
published. Prints one line of JSON: how each publish ended."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import django

WAIT = 30.0  # seconds given to a publish; TCP gives up after ~15 minutes sending, ~2 connecting


def main() -> None:
    port = os.environ["LIVE_TEST_PORT"]
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    redis = subprocess.Popen(["redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            answer = subprocess.run(["redis-cli", "-p", port, "ping"], capture_output=True, text=True)
            if answer.stdout.strip() == "PONG":
                break
            time.sleep(0.05)
        django.setup()
        from channels.layers import get_channel_layer

        print(json.dumps(asyncio.run(publish_thrice(get_channel_layer()))), flush=True)
    finally:
        redis.kill()
        redis.wait(10)


async def publish_thrice(layer) -> dict[str, str]:
    """The second publish is held on a connection that was made; the third connects anew."""
    event = {"type": "message.new", "group": "chat.1"}
    await layer.group_send("chat.1", event)
    subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "blackhole"], check=True)
    ended = {"first": "sent"}
    for which in ("second", "third"):
        sending = asyncio.get_running_loop().create_task(layer.group_send("chat.1", event))
        await asyncio.wait({sending}, timeout=WAIT)
        if not sending.done():
            return {**ended, which: "held"}
        error = sending.exception()
        ended[which] = "sent" if error is None else type(error).__name__
    return ended

if __name__ == "__main__":
    sys.exit(main())
