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
import json
import time
from collections import Counter

import httpx
import pytest
import websockets

from channels_app.services import binding_create
from sessions_app.models import Message
from tenancy.services import api_token_create

from ..channels_app.conftest import pair
from ..fakes.model_server import reply
from ..processes import Processes, free_port, needs_postgres_and_redis, redis_start, wait_for
from .test_load import SECRET, _answers, _server_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.reliability, needs_postgres_and_redis]

PHASES = 3  # before the outage, during it, after it


def per_phase(config) -> int:
    return 20 if config.getoption("--stress") else 4


def _update(n: int) -> bytes:
    return json.dumps({"update_id": 5000 + n, "message": {
        "message_id": n, "from": {"id": 42, "is_bot": False, "first_name": "Alice"},
        "chat": {"id": 42, "type": "private"}, "date": int(time.time()), "text": f"m{n}"}}).encode()


class Socket:
    """A chat page's socket: reconnects with its session and last seq whenever it drops,
    and keeps every message.new it was sent."""

    def __init__(self, url: str, *, origin: str, token: str) -> None:
        self.url = url
        self.origin = origin
        self.token = token
        self.seqs: list[int] = []
        self.session: int | None = None
        self.reconnects = 0
        self.stopping = False
        self.reconnect_now = False  # close and resume, as a page coming back does
        self.live: list[int] = []

    async def run(self) -> None:
        while not self.stopping:
            url = self.url
            if self.session is not None and self.seqs:
                url += f"?session={self.session}&last_seq={max(self.seqs)}"
            try:
                async with websockets.connect(url, origin=self.origin, open_timeout=5,
                                              additional_headers={"Authorization": f"Bearer {self.token}"}) as ws:
                    while not self.stopping and not self.reconnect_now:
                        try:
                            frame = json.loads(await asyncio.wait_for(ws.recv(), 0.5))
                        except asyncio.TimeoutError:
                            continue
                        if frame["type"] == "session":
                            assert not frame["reset"] or not self.seqs, frame  # resumed, not reset
                            self.session = frame["session_id"]
                        elif frame["type"] == "message.new":
                            self.seqs.append(frame["seq"])
            except (OSError, websockets.WebSocketException, asyncio.TimeoutError):
                pass
            if not self.stopping:
                self.reconnects += 1
                if self.reconnect_now:
                    self.reconnect_now = False
                    continue
                await asyncio.sleep(0.5)


def test_redis_restarted_during_traffic_loses_nothing_and_the_socket_catches_up(
    request, world, model_server, platform
):
    n = per_phase(request.config)
    unique = PHASES * n
    model_server.default = reply("Got it.")
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": SECRET, "username": "aria_bot"})
    pair(world, "telegram", "42", world.alice)
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    redis_port, port = free_port(), free_port()
    env = {**_server_env(model_server, platform), "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
           "QORVEN_SWEEP_INTERVAL": "2"}
    base = f"http://127.0.0.1:{port}"
    redis = [redis_start(redis_port)]  # the running server, replaced when restarted
    processes = Processes()
    try:
        worker = processes.worker(env, concurrency=2)
        processes.start("beat", "--max-interval", "1", env=env)
        server = processes.start("serve", "--no-migrate", "--port", str(port), env=env)
        assert wait_for(lambda: _answers(base + "/healthz"), 90), server.output

        async def scenario() -> tuple[Socket, Counter[int], float]:
            socket = Socket(f"ws://127.0.0.1:{port}/ws/chat/acme/aria/", origin=base, token=token)
            reading = asyncio.create_task(socket.run())
            statuses: Counter[int] = Counter()
            headers = {"content-type": "application/json", "x-telegram-bot-api-secret-token": SECRET}
            async with httpx.AsyncClient(timeout=30) as client:
                async def post(first: int) -> None:
                    for i in range(first, first + n):
                        for _ in range(50):  # not 200: delivered again, as Telegram does
                            try:
                                status = (await client.post(f"{base}/v1/webhooks/telegram", content=_update(i),
                                                            headers=headers)).status_code
                            except httpx.HTTPError:
                                status = 0
                            statuses[status] += 1
                            if status == 200:
                                break
                            await asyncio.sleep(0.3)

                await post(1)
                await asyncio.sleep(1)
                redis[0].terminate()
                redis[0].wait(10)
                outage_from = time.monotonic()
                await post(n + 1)  # while Redis is away
                await asyncio.sleep(1)
                redis[0] = redis_start(redis_port)
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
            f"server, first error: {_first_error(server.output)}\nworker, first error: {_first_error(worker.output)}\n"
            f"server, last lines: {server.output[-1500:]}\nworker, last lines: {worker.output[-1500:]}")
    finally:
        processes.stop()
        redis[0].terminate()
        redis[0].wait(10)

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


def _first_error(output: str) -> str:
    """The first traceback a process printed (where a failure that repeats itself
    started), or its first ERROR line."""
    at = output.find("Traceback (most recent call last)")
    if at < 0:
        at = output.find(" ERROR ")
    return "none" if at < 0 else output[max(0, at - 300):at + 2500]
