"""What the reliability tests share: the environment of the `qorven` processes they start
on the run's database, `qorven serve` started and answering, Telegram senders paired with
people of tenant A, their webhooks delivered as Telegram delivers them (again, while not
answered 200), and a Redis server of the test's own that a test stops and starts again."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import urllib.request
from collections import Counter

import httpx
import websockets
from django.conf import settings as django_settings
from django.db import connection

from channels_app.models import InboundEvent
from channels_app.services import binding_create
from sessions_app.models import Message

from ..channels_app.conftest import pair
from ..factories.tenancy import MembershipFactory, UserFactory
from ..processes import WORKER_READY, Process, Processes, free_port, redis_start, wait_for

SECRET = "tg-load-secret"
TELEGRAM_HEADERS = {"content-type": "application/json", "x-telegram-bot-api-secret-token": SECRET}


def server_env(model_server, platform) -> dict[str, str]:
    """The environment of a `qorven` process on the run's database, the model server and
    the platform server; on PostgreSQL with a Redis also on the run's broker, otherwise the
    embedded default (its tasks inside the server)."""
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
        url = f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    else:
        url = f"sqlite:///{db['NAME']}"  # the test database's own file: the server sees what the test stored
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SECRET_KEY": django_settings.SECRET_KEY,
           "OPENAI_BASE_URL": model_server.base_url, "OPENAI_API_KEY": "k", "QORVEN_MODEL": "scripted-model",
           "TELEGRAM_API_BASE": platform.url + "/telegram", "WHATSAPP_API_BASE": platform.url + "/whatsapp/v21.0",
           "SLACK_API_BASE": platform.url + "/slack/api", "QORVEN_LOG_LEVEL": "WARNING"}
    env.pop("CELERY_BROKER_URL", None)
    if connection.vendor != "postgresql" or not django_settings.REDIS_URL:
        env.pop("REDIS_URL", None)  # the embedded default: tasks run inside the server
    return env


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def serve(processes: Processes, env: dict[str, str], port: int) -> Process:
    """`qorven serve` on `port`, once it answers."""
    server = processes.start("serve", "--no-migrate", "--port", str(port), env=env)
    assert wait_for(lambda: answers(f"http://127.0.0.1:{port}/healthz"), 90, processes=processes), server.output
    return server


def layout_started(processes: Processes, env: dict[str, str], port: int, *, worker_slots: int,
                   beat: bool = False) -> tuple[Process, Process]:
    """The scale-out layout on the broker of `env`, its queues emptied first (a task left
    by an earlier test must not run here): `qorven worker` with `worker_slots`, `qorven
    beat` if `beat`, and `qorven serve` on `port`, started together (each spends seconds
    starting). (server, worker), once the server answers and the worker consumes."""
    processes.purge(env)
    worker = processes.worker(env, concurrency=worker_slots, wait=False)
    if beat:
        processes.start("beat", "--max-interval", "1", env=env)
    server = serve(processes, env, port)
    worker.wait_for_line(WORKER_READY)
    return server, worker


def telegram_bound(world) -> None:
    """Tenant A's Qor on Telegram, its webhooks signed with SECRET."""
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": SECRET, "username": "aria_bot"})


def senders_paired(world, senders: int) -> None:
    """`senders` people of tenant A (sender0, sender1, …), each paired as Telegram user
    800000 + their number."""
    for s in range(senders):
        person = UserFactory(username=f"sender{s}")
        MembershipFactory(tenant=world.tenant_a, user=person)
        pair(world, "telegram", str(800_000 + s), person)


def sender_update(sender: int, n: int) -> bytes:
    """Telegram's update for message n of sender `sender` (Telegram user 800000 + sender)."""
    user = 800_000 + sender
    return json.dumps({"update_id": sender * 1000 + n, "message": {
        "message_id": n, "from": {"id": user, "is_bot": False, "first_name": f"S{sender}"},
        "chat": {"id": user, "type": "private"}, "date": int(time.time()), "text": f"s{sender} m{n}"}}).encode()


def each_stored_answered_and_sent_once(platform, senders: int, per_sender: int) -> None:
    """Every message of the senders (senders_paired, sender_update) stored once as an
    inbound event and once as a message, answered once, and sent once to its sender."""
    unique = senders * per_sender
    events = Counter(InboundEvent.objects.values_list("external_id", flat=True))
    assert len(events) == unique and set(events.values()) == {1}
    assert Message.objects.filter(role="user").count() == unique
    replies = Counter(Message.objects.filter(role="assistant").values_list("session_id", "metadata__reply_to"))
    assert len(replies) == unique and set(replies.values()) == {1}
    sent = Counter(r.json["chat_id"] for r in platform.sent("sendMessage"))
    assert sent == {str(800_000 + s): per_sender for s in range(senders)}


async def deliver(client: httpx.AsyncClient, base: str, update: bytes, statuses: Counter[int], *,
                  tries: int = 50, pause: float = 0.2) -> None:
    """One Telegram update delivered to the server at `base` until it is answered 200, as
    Telegram does: again `pause` s after each other answer, or none (counted as 0), up to
    `tries` deliveries. Every answer is counted in `statuses`."""
    for _ in range(tries):
        try:
            status = (await client.post(f"{base}/v1/webhooks/telegram", content=update,
                                        headers=TELEGRAM_HEADERS)).status_code
        except httpx.HTTPError:
            status = 0
        statuses[status] += 1
        if status == 200:
            return
        await asyncio.sleep(pause)
    raise AssertionError(f"{update[:120]!r}… was never accepted in {tries} deliveries: {statuses}")


class RedisOfOurOwn:
    """A Redis server of the test's own on a free port, keeping nothing on disk: stopped,
    its data is gone, as a Redis that lost it; started again, on the same port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen = redis_start(self.port)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def start(self) -> None:
        self.proc = redis_start(self.port)


def alice_update(n: int) -> bytes:
    """Telegram's update for Alice's (Telegram user 42) message n."""
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

def first_error(output: str) -> str:
    """The first traceback a process printed (where a failure that repeats itself
    started), or its first ERROR line."""
    at = output.find("Traceback (most recent call last)")
    if at < 0:
        at = output.find(" ERROR ")
    return "none" if at < 0 else output[max(0, at - 300):at + 2500]
