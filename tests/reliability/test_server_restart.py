"""`qorven serve` stopped with SIGTERM in the middle of a load, and started again.

On the embedded default the server's own worker holds the tasks of every message it
accepted, in memory: they die with it, and what is recovered comes from the database (the
sweeper). On PostgreSQL + Redis a `qorven worker` keeps running and the tasks wait in the
broker. Either way every webhook answered 200 before the restart is processed after it:
stored once, answered once, sent once, and soon — not after a sweep interval or a lease —
and the first replies go out while the backlog is still being answered.
"""
from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter

import httpx
import pytest

from channels_app.models import InboundEvent
from channels_app.services import binding_create
from sessions_app.models import Message

from ..channels_app.conftest import pair
from ..factories.tenancy import MembershipFactory, UserFactory
from ..fakes.model_server import reply
from ..processes import Processes, free_port, wait_for
from .test_load import SECRET, _answers, _server_env, _update

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.reliability]

RECOVERY = 20.0  # seconds the restarted layout gets, beyond the model time of what is left
MODEL_DELAY = 0.4  # seconds the model takes per answer: slow enough for a backlog at the restart
WORKER_SLOTS = 2


def sizes(config) -> tuple[int, int]:
    """(senders, messages per sender)."""
    return (20, 10) if config.getoption("--stress") else (5, 6)


async def _post(base: str, senders: int, per_sender: int) -> Counter[int]:
    statuses: Counter[int] = Counter()
    headers = {"content-type": "application/json", "x-telegram-bot-api-secret-token": SECRET}

    async def sender(client: httpx.AsyncClient, s: int) -> None:
        for n in range(1, per_sender + 1):
            response = await client.post(f"{base}/v1/webhooks/telegram", content=_update(s, n), headers=headers)
            statuses[response.status_code] += 1

    async with httpx.AsyncClient(timeout=30) as client:
        await asyncio.gather(*(sender(client, s) for s in range(senders)))
    return statuses


def test_every_message_accepted_before_a_restart_is_answered_once_after_it(request, world, model_server, platform):
    senders, per_sender = sizes(request.config)
    unique = senders * per_sender
    model_server.default = reply("Got it.", delay=MODEL_DELAY)
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": SECRET, "username": "aria_bot"})
    for s in range(senders):
        person = UserFactory(username=f"sender{s}")
        MembershipFactory(tenant=world.tenant_a, user=person)
        pair(world, "telegram", str(800_000 + s), person)
    env = _server_env(model_server, platform)
    env["QORVEN_WORKER_CONCURRENCY"] = str(WORKER_SLOTS)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    processes = Processes()
    try:
        if "REDIS_URL" in env:
            processes.purge(env)
            processes.worker(env, concurrency=WORKER_SLOTS)
        server = processes.start("serve", "--no-migrate", "--port", str(port), env=env)
        assert wait_for(lambda: _answers(base + "/healthz"), 90), server.output
        statuses = asyncio.run(_post(base, senders, per_sender))
        assert statuses == {200: unique}, statuses

        os.killpg(server.popen.pid, signal.SIGTERM)
        server.popen.wait(30)
        left = unique - Message.objects.filter(role="assistant").count()
        assert left > 0, "everything was answered before the restart: the scenario proved nothing"

        restarted_at = time.monotonic()
        again = processes.start("serve", "--no-migrate", "--port", str(port), env=env)
        assert wait_for(lambda: _answers(base + "/healthz"), 90), again.output
        up_at = time.monotonic()
        recovery = RECOVERY + left * MODEL_DELAY / WORKER_SLOTS  # the backlog's own model time, and then some
        assert wait_for(lambda: len(platform.sent("sendMessage")) >= unique, recovery, processes=processes), (
            f"{len(platform.sent('sendMessage'))}/{unique} sent {recovery:.0f} s after the restart "
            f"({left} unanswered at the restart)\n{server.output[-2000:]}\n{again.output[-3000:]}")
        recovered_in = time.monotonic() - restarted_at
        first_sent = min(r.at for r in platform.sent("sendMessage") if r.at > up_at) - up_at
        time.sleep(2)  # a second answer or send would come now
    finally:
        processes.stop()

    print(f"restart: {left}/{unique} unanswered at the restart, all sent {recovered_in:.1f} s after it, "
          f"the first {first_sent:.1f} s after the server answered again")
    # Replies go out while the backlog of turns is still worked through, not after it.
    assert first_sent < 3 + left * MODEL_DELAY / WORKER_SLOTS / 4
    events = Counter(InboundEvent.objects.values_list("external_id", flat=True))
    assert len(events) == unique and set(events.values()) == {1}
    assert set(InboundEvent.objects.values_list("state", flat=True)) == {"done"}
    assert Message.objects.filter(role="user").count() == unique
    replies = Counter(Message.objects.filter(role="assistant").values_list("session_id", "metadata__reply_to"))
    assert len(replies) == unique and set(replies.values()) == {1}
    sent = Counter(r.json["chat_id"] for r in platform.sent("sendMessage"))
    assert sent == {str(800_000 + s): per_sender for s in range(senders)}
