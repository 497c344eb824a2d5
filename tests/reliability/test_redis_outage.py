"""Redis gone for about ten seconds while a reply streams to an open chat page and more
Telegram messages arrive: `qorven serve`, `qorven worker` and `qorven beat` on PostgreSQL
and a Redis server of the test's own, stopped (its data gone) and started again.

A webhook is answered 200 only once it is stored; one that cannot be is refused with an
error and delivered again, as Telegram does. Every message is answered once and sent once,
the reply that was streaming included, and the page, reconnecting with its last seq,
ends up with every message once, in order.
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
from ..processes import Processes, free_port, needs_postgres_and_redis, wait_for
from .layout import (
    TELEGRAM_HEADERS, RedisOfOurOwn, Socket, alice_update, deliver, first_error, layout_started,
    server_env, telegram_bound,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.reliability, needs_postgres_and_redis]

OUTAGE = 10.0  # seconds
LATER = 3  # messages that arrive while Redis is away
ANSWER = "A reply that takes its time to stream, word by word, while Redis goes away and comes back."


def test_redis_gone_while_a_reply_streams_loses_no_message_and_answers_each_once(world, model_server, platform):
    # The first reply streams for ~6 s, Redis going 1.5 s into it; the ones to the messages
    # stored while it was away stream once it is back, and need not take their time.
    model_server.add(reply(ANSWER, chunk_size=6, chunk_delay=0.4))
    model_server.default = reply(ANSWER, chunk_size=6, chunk_delay=0.05)
    telegram_bound(world)
    pair(world, "telegram", "42", world.alice)
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    port = free_port()
    env = {**server_env(model_server, platform), "QORVEN_SWEEP_INTERVAL": "2"}
    base = f"http://127.0.0.1:{port}"
    redis = RedisOfOurOwn()
    processes = Processes()
    unique = 1 + LATER
    try:
        server, worker = layout_started(processes, {**env, "REDIS_URL": redis.url}, port, worker_slots=2, beat=True)

        async def scenario() -> tuple[Socket, Counter[int], float, float]:
            socket = Socket(f"ws://127.0.0.1:{port}/ws/chat/acme/aria/", origin=base, token=token)
            reading = asyncio.create_task(socket.run())
            statuses: Counter[int] = Counter()
            async with httpx.AsyncClient(timeout=30) as client:
                async def post(i: int) -> None:
                    await deliver(client, base, alice_update(i), statuses, tries=100, pause=0.5)

                await asyncio.sleep(1)
                await post(1)
                while len(model_server.arrivals) < 1:  # its reply starts streaming
                    await asyncio.sleep(0.1)
                await asyncio.sleep(1.5)
                redis.stop()
                away_from = time.monotonic()
                for i in range(2, 2 + LATER):
                    await post(i)
                    await asyncio.sleep(1)
                await asyncio.sleep(max(0.0, OUTAGE - (time.monotonic() - away_from)))
                redis.start()
                back_at = time.monotonic()
            while time.monotonic() - back_at < 90 and len(platform.sent("sendMessage")) < unique:
                await asyncio.sleep(0.3)
            recovered = time.monotonic() - back_at
            await asyncio.sleep(2)  # a duplicate would arrive now
            socket.reconnect_now = True  # the page comes back: it resumes from its last seq
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and len(set(socket.seqs)) < 2 * unique:
                await asyncio.sleep(0.3)
            await asyncio.sleep(1)
            socket.stopping = True
            await reading
            return socket, statuses, recovered, back_at

        socket, statuses, recovered, back_at = asyncio.run(scenario())
        assert len(platform.sent("sendMessage")) >= unique, (
            f"{len(platform.sent('sendMessage'))}/{unique} sent\n"
            f"server, first error: {first_error(server.output)}\nworker, first error: {first_error(worker.output)}\n"
            f"worker, last lines: {worker.output[-2500:]}")
    finally:
        processes.stop()
        redis.stop()

    print(f"redis away {OUTAGE:.0f} s mid-stream: webhook statuses {dict(statuses)}, every reply sent "
          f"{recovered:.1f} s after Redis came back (each at {[round(r.at - back_at, 1) for r in platform.sent('sendMessage')]}"
          f" s), the first stored while it was away asked of the model "
          f"{model_server.arrivals[1] - back_at:.1f} s after, socket reconnects {socket.reconnects}")
    assert set(statuses) <= {200, 500, 503, 0}  # refused (delivered again) or stored, never lost
    assert Message.objects.filter(role="user").count() == unique
    replies = Counter(Message.objects.filter(role="assistant").values_list("metadata__reply_to", flat=True))
    assert len(replies) == unique and set(replies.values()) == {1}
    assert Counter(r.json["text"] for r in platform.sent("sendMessage")) == {ANSWER: unique}
    # The reply streaming as Redis went was written to its end, not given up and asked again.
    assert len(model_server.arrivals) == unique
    # What was stored while Redis was away is queued as soon as it is back (the server tries
    # its refused publishes again), not when the sweeper's grace of half a minute ends.
    assert model_server.arrivals[1] - back_at < 10
    seqs = list(Message.objects.filter(session__user=world.alice).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, 2 * unique + 1))
    assert socket.seqs == seqs  # every message once, in order, across the reconnects


def test_a_message_from_the_page_stored_while_redis_is_away_is_answered_as_soon_as_it_is_back(world, model_server):
    """A message posted through the API (the page, the terminal) while Redis is away is
    stored, and its turn, which the broker refused, is queued as soon as Redis is back —
    as a webhook's is — not when the sweeper's grace of half a minute ends."""
    model_server.default = reply("Hello again.")
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    port = free_port()
    env = {**server_env(model_server, _NoPlatform()), "QORVEN_SWEEP_INTERVAL": "2"}
    base = f"http://127.0.0.1:{port}"
    redis = RedisOfOurOwn()
    processes = Processes()
    try:
        server, worker = layout_started(processes, {**env, "REDIS_URL": redis.url}, port, worker_slots=2, beat=True)
        redis.stop()
        response = httpx.post(f"{base}/v1/qors/aria/messages", json={"content": "hello"}, timeout=30,
                              headers={"Authorization": f"Bearer {token}"})
        assert response.status_code in (200, 201), (response.status_code, response.text, server.output[-3000:])
        time.sleep(2)
        redis.start()
        back_at = time.monotonic()
        assert wait_for(lambda: model_server.arrivals, 60, processes=processes), (
            f"{server.output[-3000:]}\n{worker.output[-3000:]}")
        time.sleep(2)  # a second answer would come now
    finally:
        processes.stop()
        redis.stop()

    print(f"a page's message stored while Redis was away: asked of the model "
          f"{model_server.arrivals[0] - back_at:.1f} s after Redis came back")
    assert model_server.arrivals[0] - back_at < 10
    assert len(model_server.arrivals) == 1
    assert list(Message.objects.order_by("seq").values_list("role", "content")) == [
        ("user", "hello"), ("assistant", "Hello again.")]


class _NoPlatform:
    url = "http://127.0.0.1:9"  # nothing is sent to a platform here


def test_a_send_put_off_while_redis_is_away_goes_out_once_it_is_back_with_no_sweeper(world, model_server, platform):
    """A reply whose send is put off (Telegram answers 429, retry after a second) while
    Redis is away: the send task the broker refused is queued again as soon as Redis is
    back. It was left to the sweeper's pass over pending parts; with no beat running here,
    nothing sent it at all."""
    from ..fakes.platform_server import Canned

    model_server.default = reply(ANSWER, chunk_size=6, chunk_delay=0.3)  # ~5 s of streaming
    platform.script(r"/sendMessage$", Canned(status=429, body={
        "ok": False, "error_code": 429, "description": "Too Many Requests", "parameters": {"retry_after": 1}}))
    telegram_bound(world)
    pair(world, "telegram", "42", world.alice)
    port = free_port()
    env = server_env(model_server, platform)
    base = f"http://127.0.0.1:{port}"
    redis = RedisOfOurOwn()
    processes = Processes()
    try:
        # No beat: nothing sweeps.
        server, worker = layout_started(processes, {**env, "REDIS_URL": redis.url}, port, worker_slots=2)
        response = httpx.post(f"{base}/v1/webhooks/telegram", content=alice_update(1), timeout=30,
                              headers=TELEGRAM_HEADERS)
        assert response.status_code == 200, response.text
        assert wait_for(lambda: model_server.arrivals, 60, processes=processes), worker.output[-3000:]
        redis.stop()  # while the reply streams
        assert wait_for(lambda: platform.sent("sendMessage"), 60, processes=processes), worker.output[-3000:]
        assert wait_for(lambda: "could not be queued" in worker.output, 30, processes=processes), worker.output[-3000:]
        redis.start()
        assert wait_for(lambda: len(platform.sent("sendMessage")) == 2, 60, processes=processes), (
            worker.output[-3000:])
        time.sleep(2)  # a third request would come now
    finally:
        processes.stop()
        redis.stop()

    assert [s.json["text"] for s in platform.sent("sendMessage")] == [ANSWER, ANSWER]  # refused once, then sent
    assert list(Message.objects.filter(role="assistant").values_list("content", flat=True)) == [ANSWER]
