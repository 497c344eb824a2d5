"""`qorven serve` killed outright (SIGKILL) the moment it answered a webhook 200, in the
middle of a burst, on PostgreSQL + Redis with a `qorven worker` and `qorven beat` running.

Webhooks are stored in batches by a thread of the server's (channels_app.webhook_ingest)
and their tasks queued by another, after the answers: a 200 must never go out before its
batch is committed, and what was stored but never queued (the server died first) is
found by the sweeper. The webhooks not answered 200 are delivered again to the server
started again, as Telegram does. Every message is stored once, answered once, sent once.
"""
from __future__ import annotations

import asyncio
import time
from collections import Counter

import httpx
import pytest

from channels_app.models import InboundEvent

from ..fakes.model_server import reply
from ..processes import Processes, free_port, needs_postgres_and_redis, wait_for
from .layout import (
    TELEGRAM_HEADERS, each_stored_answered_and_sent_once, layout_started, sender_update, senders_paired, serve,
    server_env, telegram_bound,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.reliability, needs_postgres_and_redis]

SENDERS = 10
PER_SENDER = 3


async def _burst(base: str, kill) -> dict[tuple[int, int], int]:
    """Every sender's messages, all senders at once; `kill` on the first 200. The status
    of each (0: no answer)."""
    statuses: dict[tuple[int, int], int] = {}

    async def sender(client: httpx.AsyncClient, s: int) -> None:
        for n in range(1, PER_SENDER + 1):
            try:
                status = (await client.post(f"{base}/v1/webhooks/telegram", content=sender_update(s, n),
                                            headers=TELEGRAM_HEADERS)).status_code
            except httpx.HTTPError:
                status = 0
            statuses[(s, n)] = status
            if status == 200:
                kill()

    async with httpx.AsyncClient(timeout=10) as client:
        await asyncio.gather(*(sender(client, s) for s in range(SENDERS)))
    return statuses


def test_a_server_killed_right_after_a_200_has_stored_what_it_answered_and_nothing_is_lost(
    world, model_server, platform
):
    model_server.default = reply("Got it.")
    telegram_bound(world)
    senders_paired(world, SENDERS)
    env = {**server_env(model_server, platform), "QORVEN_SWEEP_INTERVAL": "2"}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    processes = Processes()
    try:
        server, _ = layout_started(processes, env, port, worker_slots=2, beat=True)

        def kill() -> None:
            if server.popen.poll() is None:
                server.kill()

        statuses = asyncio.run(_burst(base, kill))
        stored_at_kill = set(InboundEvent.objects.values_list("external_id", flat=True))
        killed_at = time.monotonic()
        answered_200 = {f"{800_000 + s}:{n}" for (s, n), status in statuses.items() if status == 200}
        # Nothing was answered 200 before it was committed: each is there, the server gone.
        assert answered_200, statuses
        assert answered_200 <= stored_at_kill, answered_200 - stored_at_kill
        left = [k for k, status in statuses.items() if status != 200]
        first_round = len(platform.sent("sendMessage"))

        again = serve(processes, env, port)

        async def redeliver() -> Counter[int]:
            codes: Counter[int] = Counter()
            async with httpx.AsyncClient(timeout=10) as client:
                for s, n in left:
                    codes[(await client.post(f"{base}/v1/webhooks/telegram", content=sender_update(s, n),
                                             headers=TELEGRAM_HEADERS)).status_code] += 1
            return codes

        assert asyncio.run(redeliver()) == ({200: len(left)} if left else Counter())
        unique = SENDERS * PER_SENDER
        assert wait_for(lambda: len(platform.sent("sendMessage")) >= unique, 90, processes=processes), (
            f"{len(platform.sent('sendMessage'))}/{unique} sent\n{again.output[-2000:]}")
        recovered_in = time.monotonic() - killed_at
        time.sleep(3)  # a second answer or send would come now
    finally:
        processes.stop()

    print(f"serve killed after a 200: {len(answered_200)} answered 200 before the kill, "
          f"{len(stored_at_kill)} stored, {len(left)} delivered "
          f"again, {first_round} sent before the restart, all sent {recovered_in:.1f} s after the kill")
    each_stored_answered_and_sent_once(platform, SENDERS, PER_SENDER)
