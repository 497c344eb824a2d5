"""Redis restarted during traffic: `qorven serve`, `qorven worker` and `qorven beat` on
PostgreSQL and a Redis server of the test's own, which is stopped (its data gone: no
snapshot, no append-only file) and started again while Telegram messages arrive and a
chat socket is open.

Server and worker are not restarted. Every message is stored once, answered once and sent
once — the tasks Redis lost with its data are found again in the database by the sweeper —
and the socket, reconnecting with its session and last seq, ends up with every message of
the chat exactly once, in seq order; while it stays open it is sent every message live too
(the server's live hub joins its groups again once Redis answers).
"""
from __future__ import annotations

import asyncio
import time
from collections import Counter

import httpx
import pytest

from sessions_app.models import Message
from tenancy.services import api_token_create

from ..channels_app.conftest import pair
from ..fakes.model_server import reply
from ..processes import Processes, free_port, needs_postgres_and_redis
from .layout import (
    RedisOfOurOwn, Socket, alice_update, deliver, first_error, layout_started, server_env,
    telegram_bound,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.reliability, needs_postgres_and_redis]

PHASES = 3  # before the outage, during it, after it


def per_phase(config) -> int:
    return 20 if config.getoption("--stress") else 4


def test_redis_restarted_during_traffic_loses_nothing_and_the_socket_catches_up(
    request, world, model_server, platform
):
    n = per_phase(request.config)
    unique = PHASES * n
    model_server.default = reply("Got it.")
    telegram_bound(world)
    pair(world, "telegram", "42", world.alice)
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    port = free_port()
    env = {**server_env(model_server, platform), "QORVEN_SWEEP_INTERVAL": "2"}
    base = f"http://127.0.0.1:{port}"
    redis = RedisOfOurOwn()
    processes = Processes()
    try:
        server, worker = layout_started(processes, {**env, "REDIS_URL": redis.url}, port, worker_slots=2, beat=True)

        async def scenario() -> tuple[Socket, Counter[int], float]:
            socket = Socket(f"ws://127.0.0.1:{port}/ws/chat/acme/aria/", origin=base, token=token)
            reading = asyncio.create_task(socket.run())
            statuses: Counter[int] = Counter()
            async with httpx.AsyncClient(timeout=30) as client:
                async def post(first: int) -> None:
                    for i in range(first, first + n):
                        await deliver(client, base, alice_update(i), statuses, pause=0.3)

                await post(1)
                await asyncio.sleep(1)
                redis.stop()
                outage_from = time.monotonic()
                await post(n + 1)  # while Redis is away
                await asyncio.sleep(1)
                redis.start()
                outage = time.monotonic() - outage_from
                await post(2 * n + 1)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(platform.sent("sendMessage")) < unique:
                await asyncio.sleep(0.3)
            await asyncio.sleep(2)  # a duplicate would arrive now
            socket.live = list(socket.seqs)  # what the open socket was sent live
            socket.reconnect_now = True  # the page comes back: it resumes from its last seq
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and len(socket.seqs) < 2 * unique:
                await asyncio.sleep(0.3)
            await asyncio.sleep(1)
            socket.stopping = True
            await reading
            return socket, statuses, outage

        socket, statuses, outage = asyncio.run(scenario())
        assert len(platform.sent("sendMessage")) >= unique, (
            f"{len(platform.sent('sendMessage'))}/{unique} sent\n"
            f"server, first error: {first_error(server.output)}\nworker, first error: {first_error(worker.output)}\n"
            f"server, last lines: {server.output[-1500:]}\nworker, last lines: {worker.output[-1500:]}")
    finally:
        processes.stop()
        redis.stop()

    print(f"redis restart: outage {outage:.1f} s, statuses {dict(statuses)}, socket reconnects {socket.reconnects}, "
          f"{len(socket.live)} of {2 * unique} messages reached the open socket live")
    assert Message.objects.filter(role="user").count() == unique
    replies = Counter(Message.objects.filter(role="assistant").values_list("metadata__reply_to", flat=True))
    assert len(replies) == unique and set(replies.values()) == {1}
    sent = Counter(r.json["text"] for r in platform.sent("sendMessage"))
    assert sent == {"Got it.": unique}
    seqs = list(Message.objects.filter(session__user=world.alice).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, 2 * unique + 1))
    assert socket.seqs == seqs  # every message once, in order, across the reconnects
    # The socket that stayed open got every message too, before the page came back: the hub
    # joined its groups again once Redis answered, and its sockets caught up from the database.
    assert socket.live == seqs

