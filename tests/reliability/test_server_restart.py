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
from collections.abc import Callable

import httpx
import pytest

from channels_app.models import InboundEvent
from sessions_app.models import Message

from ..channels_app.conftest import pair
from ..channels_app.payloads import telegram_update
from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from ..processes import Processes, free_port, wait_for
from .layout import (
    TELEGRAM_HEADERS, each_stored_answered_and_sent_once, layout_started, sender_update, senders_paired, serve,
    server_env, telegram_bound,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.reliability]

RECOVERY = 20.0  # seconds the restarted layout gets, beyond the model time of what is left
MODEL_DELAY = 0.4  # seconds the model takes per answer: slow enough for a backlog at the restart
WORKER_SLOTS = 2


def sizes(config) -> tuple[int, int]:
    """(senders, messages per sender)."""
    return (20, 10) if config.getoption("--stress") else (5, 6)


async def _post(base: str, senders: int, per_sender: int) -> Counter[int]:
    statuses: Counter[int] = Counter()

    async def sender(client: httpx.AsyncClient, s: int) -> None:
        for n in range(1, per_sender + 1):
            response = await client.post(f"{base}/v1/webhooks/telegram", content=sender_update(s, n),
                                         headers=TELEGRAM_HEADERS)
            statuses[response.status_code] += 1

    async with httpx.AsyncClient(timeout=30) as client:
        await asyncio.gather(*(sender(client, s) for s in range(senders)))
    return statuses


def test_every_message_accepted_before_a_restart_is_answered_once_after_it(request, world, model_server, platform):
    senders, per_sender = sizes(request.config)
    unique = senders * per_sender
    model_server.default = reply("Got it.", delay=MODEL_DELAY)
    telegram_bound(world)
    senders_paired(world, senders)
    env = server_env(model_server, platform)
    env["QORVEN_WORKER_CONCURRENCY"] = str(WORKER_SLOTS)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    processes = Processes()
    try:
        if "REDIS_URL" in env:
            server, _ = layout_started(processes, env, port, worker_slots=WORKER_SLOTS)
        else:
            server = serve(processes, env, port)
        statuses = asyncio.run(_post(base, senders, per_sender))
        assert statuses == {200: unique}, statuses

        os.killpg(server.popen.pid, signal.SIGTERM)
        server.popen.wait(30)
        left = unique - Message.objects.filter(role="assistant").count()
        assert left > 0, "everything was answered before the restart: the scenario proved nothing"

        restarted_at = time.monotonic()
        again = serve(processes, env, port)
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
    each_stored_answered_and_sent_once(platform, senders, per_sender)
    assert set(InboundEvent.objects.values_list("state", flat=True)) == {"done"}


def _killed_outright_and_started_again(env: dict[str, str], platform, *, post: Callable[[str], None],
                                      cut_off: Callable[[], object]) -> None:
    """The embedded default's `qorven serve` (its tasks inside it), `post(base)` made to it,
    killed outright once `cut_off()` (the work the kill cuts off has begun), and started
    again: once it answers, a reply is sent within 15 s, and 2 s more are waited for a
    second answer or send."""
    env = {**env, "QORVEN_SWEEP_INTERVAL": "1"}
    env.pop("REDIS_URL", None)  # the embedded default, on whichever database
    port = free_port()
    processes = Processes()
    try:
        server = serve(processes, env, port)
        post(f"http://127.0.0.1:{port}")
        assert wait_for(cut_off, 30), server.output
        server.kill()

        again = serve(processes, env, port)
        assert wait_for(lambda: platform.sent("sendMessage"), 15, processes=processes), (
            f"not answered after the restart\n{again.output[-3000:]}")
        time.sleep(2)  # a second answer or send would come now
    finally:
        processes.stop()


def test_a_turn_cut_off_by_a_server_killed_outright_is_answered_once_it_is_back(world, model_server, platform):
    """The embedded default's `qorven serve` (its tasks inside it) killed outright while the
    model writes a reply, and started again. The turn that died with it held its session's
    lease, which would keep the session for QORVEN_TURN_LEASE more (five minutes here) —
    but nothing of the last run holds anything any more: the message is answered as soon
    as the server is back, once, and sent once."""
    telegram_bound(world)
    pair(world, "telegram", "800000", world.alice)
    model_server.add(reply("never finished", delay=60))  # the try the kill cuts off
    model_server.default = reply("Here it is.")

    def post(base: str) -> None:
        assert httpx.post(f"{base}/v1/webhooks/telegram", content=sender_update(0, 1), headers=TELEGRAM_HEADERS,
                          timeout=10).status_code == 200

    _killed_outright_and_started_again({**server_env(model_server, platform), "QORVEN_TURN_LEASE": "300"}, platform,
                                       post=post, cut_off=lambda: len(model_server.arrivals) == 1)

    assert [r.json["text"] for r in platform.sent("sendMessage")] == ["Here it is."]
    assert len(model_server.arrivals) == 2
    replies = Counter(Message.objects.filter(role="assistant").values_list("metadata__reply_to", flat=True))
    assert list(replies.values()) == [1]
    assert Message.objects.get(role="user").answer_state == "answered"


def test_a_message_cut_off_while_its_file_is_fetched_is_answered_once_the_server_is_back(world, model_server, platform):
    """The embedded default's `qorven serve` killed outright while it fetches the file a
    Telegram message came with, and started again. The message's event, claimed by the
    run that died, would wait for its claim to go stale (two minutes) — but nothing of
    the last run holds anything any more: it is processed as soon as the server is back,
    its file fetched again, and answered once."""
    telegram_bound(world)
    pair(world, "telegram", "42", world.alice)
    found = {"ok": True, "result": {"file_id": "doc-1", "file_path": "documents/plan.txt"}}
    platform.script(r"/getFile", Canned(body=found, delay=60), Canned(body=found))  # the first, the kill cuts off
    platform.script(r"/file/bot111:AAA/documents/plan.txt", Canned(raw=b"buy milk"))
    model_server.default = reply("Read it.")
    update = telegram_update("", caption="what does it say?", document={
        "file_id": "doc-1", "file_unique_id": "doc-1", "file_name": "plan.txt", "mime_type": "text/plain",
        "file_size": 8})
    update["message"].pop("text")

    def post(base: str) -> None:
        assert httpx.post(f"{base}/v1/webhooks/telegram", json=update, headers=TELEGRAM_HEADERS,
                          timeout=10).status_code == 200

    _killed_outright_and_started_again(server_env(model_server, platform), platform,
                                       post=post, cut_off=lambda: platform.sent("/getFile"))

    assert [r.json["text"] for r in platform.sent("sendMessage")] == ["Read it."]
    assert len(model_server.arrivals) == 1 and "buy milk" in str(model_server.requests[0])
    assert Message.objects.filter(role="user").count() == 1
    assert Message.objects.filter(role="assistant").count() == 1
    assert set(InboundEvent.objects.values_list("state", flat=True)) == {"done"}
