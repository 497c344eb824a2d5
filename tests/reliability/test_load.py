"""Nothing lost, nothing twice, under load, through real processes: `qorven serve` (its
webhooks stored in batches, channels_app.webhook_ingest) and, on PostgreSQL + Redis, a
`qorven worker`; on the embedded default, the server's own worker on the SQLite file.

Senders on Telegram, WhatsApp and Slack post at once, each one's messages in order; some
deliveries are repeated, half of them racing the original. Every unique message must be
stored once (event and message), answered once and sent once on its platform, each
session's seqs gap-free with each sender's messages in the order sent. Meanwhile each
sender's chat page is open on a few WebSockets: each socket gets every `message.new` of
its own chat exactly once, and nothing of anyone else's. `pytest --stress` runs the full
size (`make stress`: 50 senders, 200 sockets)."""
from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter

import hashlib
import hmac

import httpx
import pytest
import websockets

from channels_app.models import InboundEvent
from channels_app.services import binding_create
from sessions_app.models import Message

from ..channels_app.conftest import pair
from ..factories.tenancy import MembershipFactory, UserFactory
from ..fakes.model_server import reply
from tenancy.services import api_token_create

from ..processes import Processes, free_port
from .layout import SECRET, layout_started, sender_update, serve, server_env, telegram_bound

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.reliability]

WA_SECRET = "wa-load-secret"
SLACK_SECRET = "slack-load-secret"
KINDS = ("telegram", "whatsapp", "slack")  # sender s writes on KINDS[s % 3]


def sizes(config) -> tuple[int, int, int]:
    """(senders, messages per sender, sockets per sender): 1,000 messages in 1,100
    deliveries and 200 sockets with --stress, 100 in 110 and 20 otherwise (every tenth
    message is delivered twice)."""
    return (50, 20, 4) if config.getoption("--stress") else (10, 10, 2)


def _sender_id(s: int) -> str:
    """The sender's account on its platform."""
    return {"telegram": str(800_000 + s), "whatsapp": f"1555{800_000 + s}", "slack": f"U{800_000 + s}"}[KINDS[s % 3]]



def _delivery(s: int, n: int) -> tuple[str, bytes, dict[str, str]]:
    """Message n of sender s as its platform delivers it: (path, body, headers), signed."""
    kind, text, who = KINDS[s % 3], f"s{s} m{n}", _sender_id(s)
    if kind == "telegram":
        return "telegram", sender_update(s, n), {"x-telegram-bot-api-secret-token": SECRET}
    if kind == "whatsapp":
        body = json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "WABA", "changes": [{
            "field": "messages", "value": {
                "messaging_product": "whatsapp", "metadata": {"display_phone_number": "15550000",
                                                              "phone_number_id": "1055"},
                "contacts": [{"profile": {"name": f"S{s}"}, "wa_id": who}],
                "messages": [{"from": who, "id": f"wamid.{s}.{n}", "timestamp": str(int(time.time())),
                              "type": "text", "text": {"body": text}}]}}]}]}).encode()
        return "whatsapp", body, {"x-hub-signature-256": "sha256=" + _hmac(WA_SECRET, body)}
    ts = f"1712345{s:03d}.{n:06d}"
    body = json.dumps({"token": "t", "team_id": "T0", "api_app_id": "A0LOAD", "type": "event_callback",
                       "event_id": f"Ev{s}x{n}", "event_time": int(time.time()),
                       "event": {"type": "message", "channel": f"D{s:05d}", "user": who, "text": text, "ts": ts,
                                 "channel_type": "im", "event_ts": ts}}).encode()
    stamp = str(int(time.time()))
    return "slack", body, {"x-slack-request-timestamp": stamp,
                           "x-slack-signature": "v0=" + _hmac(SLACK_SECRET, f"v0:{stamp}:".encode() + body)}


def _hmac(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


async def _post_all(base: str, senders: int, per_sender: int) -> Counter[int]:
    """Every sender posts its messages one after another, all senders at once; every tenth
    message is delivered again, right behind (racing) or after the sender's next one."""
    statuses: Counter[int] = Counter()
    rng = random.Random(16)

    async def one(client: httpx.AsyncClient, s: int, n: int) -> None:
        path, body, headers = _delivery(s, n)
        response = await client.post(f"{base}/v1/webhooks/{path}", content=body,
                                     headers={"content-type": "application/json", **headers})
        statuses[response.status_code] += 1

    async def sender(client: httpx.AsyncClient, s: int) -> None:
        later: list[int] = []
        for n in range(1, per_sender + 1):
            if n % 10 == 0 and rng.random() < 0.5:
                await asyncio.gather(one(client, s, n), one(client, s, n))  # the platform's retry races it
            else:
                await one(client, s, n)
                if n % 10 == 0:
                    later.append(n)
        for n in later:  # a retry long after the original
            await one(client, s, n)

    limits = httpx.Limits(max_connections=50)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        await asyncio.gather(*(sender(client, s) for s in range(senders)))
    return statuses


class Page:
    """A chat page's socket: what `message.new` events it was sent, in order."""

    def __init__(self, url: str, origin: str) -> None:
        self.url, self.origin = url, origin
        self.seen: list[tuple[int, str, str]] = []  # (seq, role, content)
        self.ready = asyncio.Event()
        self.stop = asyncio.Event()

    async def run(self) -> None:
        async with websockets.connect(self.url, origin=self.origin, open_timeout=30, max_size=None) as ws:
            self.ready.set()
            while not self.stop.is_set():
                try:
                    raw = await asyncio.wait_for(ws.recv(), 0.5)
                except asyncio.TimeoutError:
                    continue
                event = json.loads(raw)
                if event.get("type") == "message.new":
                    self.seen.append((event["seq"], event["role"], event["content"]))


def test_load_every_message_stored_answered_and_sent_exactly_once(request, world, model_server, platform):
    senders, per_sender, sockets = sizes(request.config)
    model_server.default = reply("Got it.")
    telegram_bound(world)
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="whatsapp",
                   credentials={"phone_number_id": "1055", "token": "wa-token", "app_secret": WA_SECRET,
                                "verify_token": "wa-verify"})
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="slack", credentials={
        "app_id": "A0LOAD", "bot_token": "xoxb-load", "signing_secret": SLACK_SECRET, "bot_user_id": "UBOT"})
    tokens = []
    for s in range(senders):
        person = UserFactory(username=f"sender{s}")
        MembershipFactory(tenant=world.tenant_a, user=person)
        pair(world, KINDS[s % 3], _sender_id(s), person)
        tokens.append(api_token_create(tenant=world.tenant_a, user=person)[1])
    env = server_env(model_server, platform)
    port = free_port()
    processes = Processes()
    try:
        if "REDIS_URL" in env:
            server, _ = layout_started(processes, env, port, worker_slots=4)
        else:
            server = serve(processes, env, port)
        base = f"http://127.0.0.1:{port}"
        unique = senders * per_sender

        def settled() -> bool:
            return sum(len(platform.sent(p)) for p in ("sendMessage", r"/1055/messages", "chat.postMessage")) >= unique

        async def scenario() -> tuple[Counter[int], list[list[Page]]]:
            pages = [[Page(f"ws://127.0.0.1:{port}/ws/chat/acme/aria/?token={tokens[s]}", base)
                      for _ in range(sockets)] for s in range(senders)]
            reading = [asyncio.create_task(page.run()) for row in pages for page in row]
            await asyncio.wait_for(asyncio.gather(*(page.ready.wait() for row in pages for page in row)), 120)
            statuses = await _post_all(base, senders, per_sender)
            deadline = time.monotonic() + 240
            while not settled() and time.monotonic() < deadline:
                processes.alive()
                await asyncio.sleep(0.5)
            # Every reply's message.new has been sent by now or is about to be; any twice would come now.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(
                len(page.seen) < 2 * per_sender for row in pages for page in row
            ):
                await asyncio.sleep(0.3)
            await asyncio.sleep(2)
            for row in pages:
                for page in row:
                    page.stop.set()
            await asyncio.gather(*reading)
            return statuses, pages

        statuses, pages = asyncio.run(scenario())
        assert set(statuses) == {200}, statuses
        assert settled(), "replies not all sent\n" + server.output[-3000:]
    finally:
        processes.stop()

    events = Counter(InboundEvent.objects.values_list("external_id", flat=True))
    assert len(events) == unique and set(events.values()) == {1}
    assert Message.objects.filter(role="user").count() == unique
    assert Message.objects.filter(role="assistant").count() == unique
    sent = Counter(r.json["chat_id"] for r in platform.sent("sendMessage"))
    sent.update(r.json["to"] for r in platform.sent(r"/1055/messages"))
    sent.update(r.json["channel"] for r in platform.sent("chat.postMessage"))
    assert sent == {(_sender_id(s) if KINDS[s % 3] != "slack" else f"D{s:05d}"): per_sender
                    for s in range(senders)}
    for s in range(senders):
        rows = list(Message.objects.filter(session__user__username=f"sender{s}").order_by("seq")
                    .values_list("seq", "role", "content"))
        assert [seq for seq, _, _ in rows] == list(range(1, len(rows) + 1))  # no gap, no repeat
        assert [c for _, role, c in rows if role == "user"] == [f"s{s} m{n}" for n in range(1, per_sender + 1)]
        for page in pages[s]:  # each of the sender's sockets: the chat as stored, each message once
            assert page.seen == rows, f"sender {s}: a socket saw {len(page.seen)} of {len(rows)}"

