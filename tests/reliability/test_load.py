"""Nothing lost, nothing twice, under load, through real processes: `qorven serve` (its
webhooks stored in batches, channels_app.webhook_ingest) and, on PostgreSQL + Redis, a
`qorven worker`; on the embedded default, the server's own worker on the SQLite file.

Senders post at once, each one's messages in order; some deliveries are repeated, half of
them racing the original. Every unique message must be stored once (event and message),
answered once and sent once, each session's seqs gap-free with each sender's messages in
the order sent. `pytest --stress` runs the full size (`make stress`)."""
from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import time
import urllib.request
from collections import Counter

import httpx
import pytest
from django.conf import settings as django_settings
from django.db import connection

from channels_app.models import InboundEvent
from channels_app.services import binding_create
from sessions_app.models import Message

from ..channels_app.conftest import pair
from ..factories.tenancy import MembershipFactory, UserFactory
from ..fakes.model_server import reply
from ..processes import Processes, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.reliability]

SECRET = "tg-load-secret"


def sizes(config) -> tuple[int, int]:
    """(senders, messages per sender): 1,000 messages in 1,100 deliveries with --stress, 100
    in 110 otherwise (every tenth message is delivered twice)."""
    return (50, 20) if config.getoption("--stress") else (10, 10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_env(model_server, platform) -> dict[str, str]:
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
        url = f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    else:
        url = f"sqlite:///{db['NAME']}"  # the test database's own file: the server sees what the test stored
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SECRET_KEY": django_settings.SECRET_KEY,
           "OPENAI_BASE_URL": model_server.base_url, "OPENAI_API_KEY": "k", "QORVEN_MODEL": "scripted-model",
           "TELEGRAM_API_BASE": platform.url + "/telegram", "QORVEN_LOG_LEVEL": "WARNING"}
    env.pop("CELERY_BROKER_URL", None)
    if connection.vendor != "postgresql" or not django_settings.REDIS_URL:
        env.pop("REDIS_URL", None)  # the embedded default: tasks run inside the server
    return env


def _update(sender: int, n: int) -> bytes:
    user = 800_000 + sender
    return json.dumps({"update_id": sender * 1000 + n, "message": {
        "message_id": n, "from": {"id": user, "is_bot": False, "first_name": f"S{sender}"},
        "chat": {"id": user, "type": "private"}, "date": int(time.time()), "text": f"s{sender} m{n}"}}).encode()


async def _post_all(base: str, senders: int, per_sender: int) -> Counter[int]:
    """Every sender posts its messages one after another, all senders at once; every tenth
    message is delivered again, right behind (racing) or after the sender's next one."""
    statuses: Counter[int] = Counter()
    headers = {"content-type": "application/json", "x-telegram-bot-api-secret-token": SECRET}
    rng = random.Random(16)

    async def one(client: httpx.AsyncClient, body: bytes) -> None:
        statuses[(await client.post(f"{base}/v1/webhooks/telegram", content=body, headers=headers)).status_code] += 1

    async def sender(client: httpx.AsyncClient, s: int) -> None:
        later: list[bytes] = []
        for n in range(1, per_sender + 1):
            body = _update(s, n)
            if n % 10 == 0 and rng.random() < 0.5:
                await asyncio.gather(one(client, body), one(client, body))  # the platform's retry races it
            else:
                await one(client, body)
                if n % 10 == 0:
                    later.append(body)
        for body in later:  # a retry long after the original
            await one(client, body)

    limits = httpx.Limits(max_connections=50)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        await asyncio.gather(*(sender(client, s) for s in range(senders)))
    return statuses


def test_load_every_message_stored_answered_and_sent_exactly_once(request, world, model_server, platform):
    senders, per_sender = sizes(request.config)
    model_server.default = reply("Got it.")
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": SECRET, "username": "aria_bot"})
    for s in range(senders):
        person = UserFactory(username=f"sender{s}")
        MembershipFactory(tenant=world.tenant_a, user=person)
        pair(world, "telegram", str(800_000 + s), person)
    env = _server_env(model_server, platform)
    port = _free_port()
    processes = Processes()
    try:
        if "REDIS_URL" in env:
            processes.purge(env)
            processes.worker(env, concurrency=4)
        server = processes.start("serve", "--no-migrate", "--port", str(port), env=env)
        base = f"http://127.0.0.1:{port}"
        assert wait_for(lambda: _answers(base + "/healthz"), 90), server.output

        statuses = asyncio.run(_post_all(base, senders, per_sender))
        unique = senders * per_sender
        assert set(statuses) == {200}, statuses

        def settled() -> bool:
            return len(platform.sent("sendMessage")) >= unique
        assert wait_for(settled, 240, processes=processes), (
            f"{len(platform.sent('sendMessage'))}/{unique} replies sent\n" + server.output[-3000:])
        time.sleep(2)  # any second send would come now
    finally:
        processes.stop()

    events = Counter(InboundEvent.objects.values_list("external_id", flat=True))
    assert len(events) == unique and set(events.values()) == {1}
    users = Message.objects.filter(role="user", channel="telegram")
    assert users.count() == unique
    assert Message.objects.filter(role="assistant").count() == unique
    sent = Counter(r.json["chat_id"] for r in platform.sent("sendMessage"))
    assert sent == {str(800_000 + s): per_sender for s in range(senders)}
    for s in range(senders):
        rows = list(Message.objects.filter(session__user__username=f"sender{s}").order_by("seq")
                    .values_list("seq", "role", "content"))
        assert [seq for seq, _, _ in rows] == list(range(1, len(rows) + 1))  # no gap, no repeat
        assert [c for _, role, c in rows if role == "user"] == [f"s{s} m{n}" for n in range(1, per_sender + 1)]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False
