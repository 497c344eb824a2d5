"""Ingest, fan-out and turn overhead, end to end against real server processes.

Webhooks stored per second, live events to WebSocket clients, and what a turn costs
beyond the model, each beside a minimal baseline measured in the same run.

Usage: ``python bench/e2e.py [--quick] [--only ingest,fanout,turn] [--layout NAME]
[--live-layer lists|pubsub] [--server daphne|uvicorn] [--profile DIR]`` (normally through ``bench/run.py``).
Folds in the former bench/live.py (200 sockets on one chat, fed by webhooks/posts).

Two layouts, each on processes started here:

- ``embedded``: one ``qorven serve`` on a SQLite file in a temporary directory, no Redis,
  no broker (tasks run on the Celery worker embedded in it; the channel layer is in memory);
- ``postgres+redis``: ``qorven serve`` plus ``qorven worker --concurrency 4`` on a fresh
  PostgreSQL database (``$BENCH_POSTGRES_URL``, default
  ``postgres://postgres@127.0.0.1:5432/qorven_bench_e2e``, created and dropped here) and
  Redis database 6 (``$BENCH_REDIS_URL``; flushed before, between phases and after).
  Skipped with a note when either is unreachable.

The model is a fake OpenAI-compatible server in this process answering at once (it
echoes the last user message, so a reply names the message it answers), and Telegram's
API a fake answering ok. A helper process with Django configured for the layout's
database sets up one tenant with a Qor, a Telegram binding, 554 member users with API
tokens, 500 of them paired to a Telegram sender (Identities created in bulk), and reads
figures back from the database. Each phase runs on freshly started processes; what the
previous phase left (unprocessed events, unanswered messages, turn leases) is closed first.

1. ``ingest``: 50 concurrent keep-alive clients (aiohttp) POST Telegram webhooks
   (``/v1/webhooks/telegram``) from 500 paired senders; 10 % of the deliveries are re-sent
   (the same update), half of those right behind the original (so two clients post them at
   once), half a while later. accepted/s = 200 answers ÷ the posting phase's wall time;
   stored/s = unique InboundEvents ÷ (the last one's ``created_at`` − the first POST);
   lost = unique updates without an InboundEvent; duplicated = extra InboundEvents plus
   extra stored user messages for one update (both should be 0). Base: a trivial ASGI app
   (bench/_trivial_asgi.py) under the same server software (uvicorn or daphne), hit by the same
   client with the same deliveries and concurrency, just before Qorven's run and again once
   its processes have stopped; ratio = accepted/s ÷ the mean of its two req/s.
   Every delivery is also processed (pairing rules, the stored message, a turn with the
   fake model's reply, the reply sent to the fake Telegram) while the posting goes on: in
   the embedded layout that work shares the serving process. The phase then waits until
   every reply is sent: processing/s = replies sent ÷ (the last one's ``sent_at`` − the
   first POST), reported with the CPU each message cost the processes.
2. ``fanout``: 200 WebSocket clients (``/ws/chat/<tenant>/<qor>/?token=…``, Origin =
   the server) on ONE chat, a message posted on the JSON API (``POST /v1/qors/<qor>/messages``)
   at a time, each waiting for every client to have it and the reply; then 200 clients on
   200 chats (200 users, a token each), a message posted in each, 10 at a time (their
   turns run meanwhile; the phase ends once every message is delivered). Latency
   per delivery = the client's wall clock at receipt − the message's ``created_at`` (the
   server's wall clock when it built the row, before it is stored; same machine, same
   clock). Base: a minimal broadcast server (bench/_broadcast.py, aiohttp.web in its own
   process: stamps ``created_at``, encodes once, writes to every socket of the chat) with
   the same clients and the same measurement. On PostgreSQL + Redis both cases run once
   more with the fan-out alone: messages stored without their live event, whose events the
   bench's Django process then publishes (as a worker publishes a reply) with
   ``created_at`` stamped as it hands each over — the layer, the server's hub and the
   sockets, no store and no turns (10 chats at a time in the 200-chat case). The embedded
   layout's in-process layer has no other process to publish from.
3. ``turn``: a user message POSTed on the JSON API → the assistant reply's
   ``message.new`` on a WebSocket of that chat, minus the fake model's own handling time
   of that request (measured in the fake: 0.4–1.5 ms). Cases: 1 user, turns one after
   another (the session starts with 10 stored messages); 50 users at once, a few turns
   each; 1 user whose session holds 10k stored messages (enough to fill the prompt's
   token budget: the base that tells the history's size from the prompt's); 1 user whose
   session holds 1M (bench/_common.py ``fill``, from the helper); and 1 user with 10
   stored messages once those rows of other users are in the table. The last two take
   their turns alternately (one of each in turn), so a drift of the machine's speed during
   the run reaches both alike; their ratio is a row of its own ("turns alternated": the
   history's size alone, the table the same). And a paired Telegram sender's turns: the
   webhook POSTed → the reply's ``sendMessage`` arriving at the fake Telegram API (its
   arrival time taken there), minus the model's handling, held to the same 25 ms. A filled session's
   turns queue its summarizer, which works through the backlog a run at a time; once
   its case is measured, the chat is archived so that work stops and does not share the
   CPUs with the next case (its rows stay in the table).

Goals (reported, not asserted): ingest ≥ 400/s accepted and stored on postgres+redis with
ratio ≥ 0.15, nothing lost or duplicated anywhere; fan-out p50 ≤ 10 ms and p99 ≤ 50 ms at
200 sockets and within 2× of the base; turn overhead p50 ≤ 25 ms at 1 user on both
layouts (from the page's API and from Telegram), and within 1.2× (p50) of it with 1M
messages in the session and with 1M other rows in the table.

Sizes: 5,000 deliveries, 20 one-chat messages, 50 turns (4 each for the 50 users), 10k
and 1M rows (about 7 minutes in all on 2 CPUs, most of it the embedded ingest: ~40
webhooks/s); ``--quick``: 300 deliveries, 3 one-chat messages, 10 turns (1 each for the
50 users), 2k and 10k rows — a smoke run of every phase on both layouts in about a minute
each; its goals are for the full run. Everything stays on 127.0.0.1; every wait is bounded; every process started
here is killed at the end (also on errors and Ctrl-C), the temporary directory and the
bench database are removed. Progress goes to stderr; the last stdout line is
``{"bench": "e2e", "rows": [...], "notes": [...]}``.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import _servers
from _common import Row, label, log, met
from _servers import (
    FakeModel,
    FakeTelegram,
    Helper,
    Servers,
    base_env,
    cpu_seconds,
    django_setup,
    drop_postgres,
    flush_redis,
    free_port,
    helper_loop,
    kill_on_exit,
    pct,
    spawn,
    stamp,
    stop,
    stop_all,
    unreachable,
    wait_http,
)

T = TypeVar("T")

DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/qorven_bench_e2e"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/6"
LAYOUTS = ("embedded", "postgres+redis")
PHASES = ("ingest", "fanout", "turn")
TENANT, QOR, OWNER = "acme", "aria", "alice"
TG_SECRET, TG_BASE_ID = "bench-e2e-secret", 700_000  # sender i is Telegram user TG_BASE_ID + i
SENDERS, CLIENTS, CONCURRENCY, POST_AT_ONCE = 500, 200, 50, 10
# Users u0000…: the first SENDERS are paired Telegram senders (and the first CLIENTS of
# them the 200 chats of the fan-out); then the turn cases' users.
SEQ_USER, CONCURRENT_FIRST, CONCURRENT_USERS = SENDERS, SENDERS + 1, 50
MID_USER, BIG_USER, OTHER_USER = (CONCURRENT_FIRST + CONCURRENT_USERS + i for i in range(3))
USERS = OTHER_USER + 1
SMALL_SESSION = 10  # messages stored in a turn user's session before it starts
NONCE = re.compile(r"\[(n[0-9a-f]{12})\]")
PLATFORM_SENDER = SENDERS - 1  # the paired sender of the Telegram turns (its ingest backlog is closed first)
PLATFORM_UPDATES = itertools.count(3_000_000)  # update ids no ingest delivery uses
WAIT = 30.0  # at most this long for one message (to every client), one reply
CASE_DEADLINE = 180.0  # a turn case stops sending after this long
DAPHNE = Path(sys.executable).with_name("daphne")
BENCH_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Sizes:
    deliveries: int
    fanout_messages: int
    turns: int
    turns_each: int
    mid: int  # enough to fill the prompt's budget (QORVEN_NUM_CTX, 8192 tokens by default)
    big: int
    processing_timeout: float  # seconds for every ingested message to be answered and its reply sent


FULL = Sizes(deliveries=5_000, fanout_messages=20, turns=50, turns_each=4, mid=10_000, big=1_000_000,
             processing_timeout=180.0)
QUICK = Sizes(deliveries=300, fanout_messages=3, turns=10, turns_each=1, mid=2_000, big=10_000,
              processing_timeout=30.0)


def nonce() -> str:
    return f"n{uuid.uuid4().hex[:12]}"


def nonce_of(text: str) -> str:
    found = NONCE.search(text)
    assert found is not None, text
    return found.group(1)


def figure(layout: str, name: str, measured: float | int | None, *, baseline: float | None = None,
           goal: str = "", ok: bool | None = None, unit: str = "") -> Row:
    """One row of the table (the unit, if any, in the figure's name); `ok` None: reported, not a goal."""
    ratio = round(measured / baseline, 2) if measured is not None and baseline else None
    return {"layout": layout, "figure": f"{name} ({unit})" if unit else name, "measured": measured, "baseline": baseline,
            "ratio": ratio, "goal": goal or "reported", "met": met(ok) if ok is not None else "—"}


# --- the database helper (a child process with Django set up for the layout) -----------------


def helper_main() -> int:
    """Set up and read back the layout's database (commands from the parent on stdin)."""
    django_setup()
    from io import StringIO

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.db.models import Count, Max

    from _common import fill, settle
    from channels_app.models import Identity, InboundEvent, OutboundDelivery
    from channels_app.services import binding_create
    from sessions_app.models import Message, Session
    from sessions_app.services import message_append, session_resolve
    from tenancy.models import ApiToken, Membership, Qor, Tenant
    from tenancy.selectors import token_digest
    from tenancy.services import api_token_create

    User = get_user_model()
    pg = connection.vendor == "postgresql"

    def chat(user: Any) -> Session:
        tenant = Tenant.objects.get(slug=TENANT)
        return session_resolve(tenant=tenant, qor=Qor.objects.get(tenant=tenant, slug=QOR), channel="web", user=user)

    def user(i: int) -> Any:
        return User.objects.get(username=f"u{i:04d}")

    def setup() -> Any:
        """Tenant, Qor, owner, binding; USERS members with a token each, the first SENDERS
        paired to Telegram senders; the chats the sockets watch exist (a greeting each),
        the turn users' with SMALL_SESSION messages."""
        call_command("migrate", interactive=False, verbosity=0)
        call_command("bootstrap", tenant=TENANT, qor=QOR, owner=OWNER, stdout=StringIO())
        tenant = Tenant.objects.get(slug=TENANT)
        binding_create(tenant=tenant, qor=Qor.objects.get(tenant=tenant, slug=QOR), kind="telegram",
                       credentials={"token": "111:AAA", "secret": TG_SECRET, "username": "aria_bot"})
        User.objects.bulk_create([User(username=f"u{i:04d}", password="!") for i in range(USERS)])  # unusable
        people = list(User.objects.filter(username__startswith="u0").order_by("username"))
        Membership.objects.bulk_create([Membership(tenant=tenant, user=u) for u in people])
        Identity.objects.bulk_create([
            Identity(tenant=tenant, channel="telegram", external_id=str(TG_BASE_ID + i), user=people[i],
                     display_name=f"Sender {i}", approval=Identity.Approval.APPROVED, reply_target=str(TG_BASE_ID + i))
            for i in range(SENDERS)])
        raws = [f"qv_{uuid.uuid4().hex}{uuid.uuid4().hex}" for _ in people]
        ApiToken.objects.bulk_create([ApiToken(tenant=tenant, user=u, name="bench", prefix=raw[:10],
                                               digest=token_digest(raw)) for u, raw in zip(people, raws)])
        owner = User.objects.get(username=OWNER)
        for person in [owner, *people[:CLIENTS]]:
            message_append(session=chat(person), role="assistant", content="Hello!", channel="web", notify=False)
        for i in [SEQ_USER, *range(CONCURRENT_FIRST, CONCURRENT_FIRST + CONCURRENT_USERS), OTHER_USER]:
            fill(chat(people[i]), SMALL_SESSION, pg)
        settle(pg)
        return {"owner": api_token_create(tenant=tenant, user=owner, name="bench")[1], "users": raws}

    def leftovers_clear() -> Any:
        """What the last phase's killed processes left is closed, so the next phase
        measures its own work: unprocessed events, unanswered messages, leases, sends."""
        return {
            "events": InboundEvent.objects.filter(state__in=["pending", "processing"])
            .update(state="done", result="closed by the benchmark"),
            "messages": Message.objects.filter(answer_state=Message.Answer.PENDING)
            .update(answer_state=Message.Answer.FAILED),
            "leases": Session.objects.exclude(turn_owner="").update(turn_owner="", turn_lease_until=None),
            "deliveries": OutboundDelivery.objects.filter(state__in=["pending", "sending"])
            .update(state="failed", last_error="closed by the benchmark"),
        }

    def event_count() -> int:
        return InboundEvent.objects.count()

    def publish_alone(users: list[int], keys: list[str]) -> Any:
        """The fan-out alone: a message per chat (user index, or -1 for the owner) stored
        without its live event, then the event published from this process — another
        process than the server's, as a worker's would be — stamped as it is handed over."""
        from channels_app.live_events import message_event
        from qorven.runtime.publisher import broadcast_flush, broadcast_soon

        owner = User.objects.get(username=OWNER)
        stored = [message_append(session=chat(owner if i < 0 else user(i)), role="user", content=f"alone [{key}]",
                                 channel="web", notify=False).message for i, key in zip(users, keys)]
        for message in stored:
            event = message_event(message)
            event["created_at"] = time.time()  # from the event, not the row
            broadcast_soon(message.session_id, event)
        return broadcast_flush()

    def replies_sent() -> Any:
        """The replies sent to the fake Telegram so far, and when the last one was."""
        parts = OutboundDelivery.objects.filter(binding__kind="telegram")
        last = parts.filter(state="sent").aggregate(last=Max("sent_at"))["last"]
        return {"sent": parts.filter(state="sent").count(), "failed": parts.filter(state="failed").count(),
                "last": last.timestamp() if last else None}

    def ingest_counts() -> Any:
        events = InboundEvent.objects.all()
        last = events.aggregate(last=Max("created_at"))["last"]
        stored = Message.objects.filter(channel="telegram", role="user").exclude(external_id="")  # not fill()'s
        twice = list(stored.values("external_id").annotate(n=Count("pk")).filter(n__gt=1).values_list("external_id", "n"))
        return {
            "ids": list(events.values_list("external_id", flat=True)),
            "last": last.timestamp() if last else None,
            "states": dict(events.values_list("state").annotate(n=Count("pk")).values_list("state", "n")),
            "messages": stored.count(),
            "messages_twice": sum(n - 1 for _, n in twice),
            "twice_sample": [list(stored.filter(external_id=x).values("session_id", "seq", "external_scope",
                                                                     "external_id", "content", "created_at"))
                             for x, _ in twice[:3]],
        }

    def fill_session(user_index: int, size: int) -> Any:
        started = time.perf_counter()
        session = chat(user(user_index))
        if session.last_seq:
            raise ValueError(f"u{user_index:04d}'s session is not empty")
        fill(session, size, pg)
        filled = time.perf_counter() - started
        settle(pg)
        return {"fill_s": round(filled, 1), "settle_s": round(time.perf_counter() - started - filled, 1),
                "messages": Message.objects.count()}

    def chat_close(user_index: int) -> Any:
        """Archive the user's chat: the summarizer catching up on a filled session's backlog
        (a run after every exchange over the window, one after another) stops at its next
        run instead of sharing the CPUs with the cases after it. Its rows stay."""
        return Session.objects.filter(pk=chat(user(user_index)).pk).update(state=Session.State.ARCHIVED)

    def platform_stages(sender: int, first_update: int) -> Any:
        """Where a Telegram turn's time went, from the rows' own stamps (p50 ms of each step
        over the sender's turns from update `first_update` on): the stored webhook → its
        message in the chat (the task's hop, the channel rules), → the reply stored (the
        turn), → its delivery planned, → sent (the platform answered)."""
        steps: dict[str, list[float]] = {"hop and rules": [], "turn": [], "planned": [], "sent": []}
        events = InboundEvent.objects.filter(sender_id=str(TG_BASE_ID + sender), state="done").order_by("pk")
        for event in events:
            update = int(event.external_id.rsplit(":", 1)[-1]) - 1
            if update < first_update:
                continue
            asked = Message.objects.filter(external_id=event.external_id, role="user").first()
            reply = asked and Message.objects.filter(session_id=asked.session_id, role="assistant",
                                                     metadata__reply_to=asked.seq).first()
            part = reply and OutboundDelivery.objects.filter(message=reply, part=0, state="sent").first()
            if not part:
                continue
            stamps = [event.created_at, asked.created_at, reply.created_at, part.created_at, part.sent_at]
            for name, start, end in zip(steps, stamps, stamps[1:]):
                steps[name].append((end - start).total_seconds() * 1000)
        return {name: round(sorted(ms)[len(ms) // 2], 2) if ms else None for name, ms in steps.items()}

    return helper_loop({"setup": setup, "leftovers_clear": leftovers_clear, "event_count": event_count,
                        "replies_sent": replies_sent, "publish_alone": publish_alone,
                        "ingest_counts": ingest_counts, "fill_session": fill_session, "chat_close": chat_close,
                        "platform_stages": platform_stages})


# --- clients -------------------------------------------------------------------------------------


def client_session(limit: int = 0) -> Any:
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit),
                                 timeout=aiohttp.ClientTimeout(total=WAIT))


class Watchers:
    """WebSocket clients in this event loop, recording when each one gets the messages
    the bench waits for (registered with `expect`; matched by the nonce in their content):
    a user message's delivery latency (wall clock at receipt − its created_at), and the
    reply's arrival (perf_counter)."""

    def __init__(self) -> None:
        self.expected: set[str] = set()
        self.latency_ms: dict[str, list[float]] = {}
        self.replies: dict[str, int] = {}
        self.reply_at: dict[str, float] = {}
        self.connected = 0
        self.tasks: list[asyncio.Task[None]] = []
        self.changed = asyncio.Event()
        self.http: Any = None

    def expect(self, key: str) -> None:
        self.expected.add(key)
        self.latency_ms.setdefault(key, [])
        self.replies.setdefault(key, 0)

    def got(self, key: str) -> int:
        return len(self.latency_ms.get(key, ()))

    async def connect(self, urls: list[str], origin: str | None) -> None:
        """One socket per URL (20 connecting at a time); returns when all are open."""
        import aiohttp

        if self.http is None:  # a session of their own: no request timeout over a socket's life
            self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                              timeout=aiohttp.ClientTimeout(total=None, connect=WAIT))
        gate = asyncio.Semaphore(20)
        self.tasks += [asyncio.create_task(self._watch(self.http, url, origin, gate)) for url in urls]
        target = self.connected + len(urls)
        if not await self.until(lambda: self.connected >= target, 120):
            raise RuntimeError(f"only {self.connected}/{target} WebSockets connected in 120 s")
        # What exists now (the sockets, this process's modules) is left out of full
        # collections, which took ~50 ms here: a pause of the clients is not the server's.
        gc.collect()
        gc.freeze()

    async def _watch(self, http: Any, url: str, origin: str | None, gate: asyncio.Semaphore) -> None:
        import aiohttp

        headers = {"Origin": origin} if origin else {}
        async with gate:
            for attempt in range(5):
                try:
                    ws = await http.ws_connect(url, headers=headers, heartbeat=None, max_msg_size=0,
                                               timeout=aiohttp.ClientWSTimeout(ws_close=5.0))
                    break
                except Exception:
                    if attempt == 4:
                        raise
                    await asyncio.sleep(0.5 * (attempt + 1))
        seen: set[tuple[str, str]] = set()  # this socket's (role, nonce): a catch-up repeat counts once
        async with ws:
            first = True
            async for frame in ws:
                now = time.time()
                if first:  # the "session" event: connected and caught up
                    first = False
                    self.connected += 1
                    self.changed.set()
                self._record(json.loads(frame.data), now, seen)

    def _record(self, event: dict[str, Any], now: float, seen: set[tuple[str, str]]) -> None:
        if event.get("type") != "message.new":
            return
        found = NONCE.search(event.get("content") or "")
        if not found or found.group(1) not in self.expected:
            return
        key, role = found.group(1), event.get("role")
        if (role, key) in seen:
            return
        seen.add((role, key))
        if role == "user":
            created = event["created_at"]
            created = created if isinstance(created, float) else stamp(created)
            self.latency_ms[key].append((now - created) * 1000)
        elif role == "assistant":
            self.replies[key] += 1
            self.reply_at.setdefault(key, time.perf_counter())
        self.changed.set()

    async def until(self, condition: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not condition():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), min(left, 0.5))
            except asyncio.TimeoutError:
                pass
        return True

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.http is not None:
            await self.http.close()
        gc.unfreeze()


async def post_json(http: Any, url: str, body: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with http.post(url, json=body, headers=headers) as response:
        if response.status not in (200, 201):
            raise RuntimeError(f"POST {url} answered {response.status}: {(await response.text())[:200]}")
        return dict(await response.json())


# --- 1. ingest -------------------------------------------------------------------------------------


def telegram_update(i: int, sender: int, text: str = "") -> bytes:
    """Update i (message id i + 1) from paired sender `sender`, in a private chat."""
    user_id = TG_BASE_ID + sender
    return json.dumps({"update_id": i + 1, "message": {
        "message_id": i + 1, "date": int(time.time()), "text": text or f"ingest {i}",
        "from": {"id": user_id, "is_bot": False, "first_name": f"Sender {sender}"},
        "chat": {"id": user_id, "type": "private", "first_name": f"Sender {sender}"}}}).encode()


def external_id(i: int) -> str:
    return f"{TG_BASE_ID + i % SENDERS}:{i + 1}"


def delivery_plan(total: int, seed: int = 7) -> tuple[list[bytes], set[str]]:
    """`total` deliveries of total − total/10 unique updates; each re-sent one goes right
    behind its original (half of them: posted at the same moment by another client) or
    50–500 deliveries later. Returns the bodies in posting order and the unique ids."""
    rng = random.Random(seed)
    unique = total - total // 10
    keyed = [(float(i), i) for i in range(unique)]
    for n, i in enumerate(rng.sample(range(unique), total - unique)):
        keyed.append((i + (0.5 if n % 2 == 0 else rng.randint(50, 500) + 0.5), i))
    keyed.sort()
    return [telegram_update(i, i % SENDERS) for _, i in keyed], {external_id(i) for i in range(unique)}


@dataclass
class Posted:
    seconds: float = 0.0
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0
    started_wall: float = 0.0

    @property
    def ok(self) -> int:
        return self.statuses.get(200, 0)


async def post_all(url: str, bodies: list[bytes], headers: dict[str, str], concurrency: int) -> Posted:
    """POST every body, `concurrency` keep-alive clients at once, each taking the next."""
    result = Posted()
    it = iter(bodies)

    async def client(http: Any) -> None:
        for body in it:
            try:
                async with http.post(url, data=body, headers=headers) as response:
                    await response.read()
                    result.statuses[response.status] = result.statuses.get(response.status, 0) + 1
            except Exception:
                result.errors += 1

    async with client_session(limit=concurrency) as http:
        result.started_wall = time.time()
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
        result.seconds = time.perf_counter() - started
    return result


WEBHOOK_HEADERS = {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": TG_SECRET}


def asgi_server(env: dict[str, str]) -> str:
    """The ASGI server `qorven serve` runs on in this layout (QORVEN_ASGI_SERVER, else its default)."""
    return env.get("QORVEN_ASGI_SERVER") or "uvicorn"


@contextmanager
def trivial_app(tmp: Path, env: dict[str, str]) -> Iterator[Callable[[list[bytes]], tuple[Posted, float]]]:
    """A trivial ASGI app under the server `qorven serve` runs on (with the options it gives
    it), up while the block runs: a function that posts deliveries to it, as the ingest
    phase does, and returns what it answered and that server's CPU seconds."""
    port = free_port()
    server = asgi_server(env)
    if server == "uvicorn":
        command = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port), "--lifespan", "off",
                   "--ws", "websockets-sansio", "--no-proxy-headers", "--no-server-header", "--log-level", "warning",
                   "_trivial_asgi:app"]
    else:
        command = [str(DAPHNE), "-b", "127.0.0.1", "-p", str(port), "_trivial_asgi:app"]
    proc = spawn(command, {**env, "PYTHONPATH": str(BENCH_DIR)}, tmp / f"trivial-{server}.log")
    url = f"http://127.0.0.1:{port}/v1/webhooks/telegram"

    def measure(bodies: list[bytes]) -> tuple[Posted, float]:
        asyncio.run(post_all(url, bodies[:200], WEBHOOK_HEADERS, CONCURRENCY))  # warm-up
        cpu = cpu_seconds(proc)
        posted = asyncio.run(post_all(url, bodies, WEBHOOK_HEADERS, CONCURRENCY))
        return posted, cpu_seconds(proc) - cpu

    try:
        wait_http(f"http://127.0.0.1:{port}/", [proc], 30, "the trivial ASGI app")
        yield measure
    finally:
        stop(proc)


def poll(fetch: Callable[[], T], done: Callable[[T], bool], timeout: float) -> T:
    """What `fetch` returns once `done` with it, or at `timeout` seconds, whichever first."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def wait_stored(helper: Helper, count: int, timeout: float) -> bool:
    return poll(lambda: helper("event_count"), lambda n: n >= count, timeout) >= count


def wait_sent(helper: Helper, count: int, timeout: float) -> dict[str, Any]:
    """The replies sent (or failed) once `count` of them are, or at `timeout` seconds."""
    return poll(lambda: helper("replies_sent"), lambda s: s["sent"] + s["failed"] >= count, timeout)


def ingest(layout: Layout, sizes: Sizes) -> tuple[list[Row], list[str]]:
    bodies, unique = delivery_plan(sizes.deliveries)
    # The baseline is measured on a quiet machine just before Qorven's run and again just
    # after its processes have stopped: its mean, so a machine that speeds up or slows down
    # during the phase moves both sides alike.
    with trivial_app(layout.tmp, layout.env) as trivial:
        base, base_cpu = trivial(bodies)
        layout.start("ingest")
        url = f"{layout.base}/v1/webhooks/telegram"
        warm = [telegram_update(900_000 + i, i) for i in range(20)]  # other ids: first requests, connections
        asyncio.run(post_all(url, warm, WEBHOOK_HEADERS, 10))
        sent_before = wait_sent(layout.helper, len(warm), 15)["sent"]  # their replies out of the way
        before = layout.helper("event_count")
        cpu_start = [cpu_seconds(proc) for proc in layout.procs]
        posted = asyncio.run(post_all(url, bodies, WEBHOOK_HEADERS, CONCURRENCY))
        cpu = [cpu_seconds(proc) - used for proc, used in zip(layout.procs, cpu_start)]
        complete = wait_stored(layout.helper, before + len(unique), 15)
        counts = layout.helper("ingest_counts")
        # Then every stored message is answered and its reply sent: the processing's own rate.
        sent = wait_sent(layout.helper, sent_before + len(unique), sizes.processing_timeout)
        cpu_all = [cpu_seconds(proc) - used for proc, used in zip(layout.procs, cpu_start)]
        layout.stop()
        again, _ = trivial(bodies)
    rates = [base.ok / base.seconds, again.ok / again.seconds]
    base_rate = statistics.fmean(rates)
    log(f"{layout.name}/ingest: trivial ASGI app under {asgi_server(layout.env)}: {base.ok} × 200 in {base.seconds:.2f} s"
        f" before, {again.ok} in {again.seconds:.2f} s after: {rates[0]:.0f}/s and {rates[1]:.0f}/s, mean {base_rate:.0f}/s")
    ids = counts["ids"]
    stored = len(unique & set(ids))
    duplicated = (len(ids) - len(set(ids))) + counts["messages_twice"]
    if counts["messages_twice"]:
        log(f"{layout.name}/ingest: updates stored as more than one message, e.g. {counts['twice_sample']}")
    accepted = posted.ok / posted.seconds
    stored_rate = stored / (counts["last"] - posted.started_wall) if counts["last"] else 0.0
    log(f"{layout.name}/ingest: {len(bodies)} deliveries ({len(unique)} unique) in {posted.seconds:.2f} s:"
        f" {accepted:.0f}/s accepted, {stored_rate:.0f}/s stored; answers {posted.statuses},"
        f" {posted.errors} failed; events by state {counts['states']}")
    replied = sent["sent"] - sent_before
    processed_rate = replied / (sent["last"] - posted.started_wall) if replied and sent["last"] else 0.0
    log(f"{layout.name}/ingest: {replied} of {len(unique)} messages answered and their replies sent"
        f" {sent['last'] - posted.started_wall if sent['last'] else 0:.1f} s after the first POST:"
        f" {processed_rate:.0f}/s; {sent['failed']} replies failed")
    pg = layout.name == "postgres+redis"
    name = layout.name
    rows = [
        figure(name, "ingest: webhooks accepted", round(accepted), unit="/s", baseline=round(base_rate),
               goal="≥ 400/s, ratio ≥ 0.15" if pg else "ratio ≥ 0.15",
               ok=(accepted >= 400 or not pg) and accepted / base_rate >= 0.15),
        figure(name, "ingest: webhooks stored", round(stored_rate), unit="/s",
               goal="≥ 400/s" if pg else "", ok=stored_rate >= 400 if pg else None),
        figure(name, "ingest: lost", len(unique) - stored, goal="0", ok=stored == len(unique)),
        figure(name, "ingest: duplicated", duplicated, goal="0", ok=duplicated == 0),
        figure(name, "processing: messages answered and replies sent", round(processed_rate), unit="/s",
               goal="reported", ok=None),
    ]
    notes = [f"{name}/ingest: {len(bodies):,} deliveries of {len(unique):,} updates from {SENDERS} paired senders,"
             f" {CONCURRENCY} clients; answers {posted.statuses}" + (f", {posted.errors} failed" if posted.errors else "")
             + f"; {counts['messages']:,} messages stored (processed) once the last was stored"
             + ("" if complete else "; NOT all stored within 15 s of the last POST"),
             f"{name}/ingest: CPU per delivery while posting: serve {cpu[0] / len(bodies) * 1000:.1f} ms"
             + (f", worker (its pool included) {cpu[1] / len(bodies) * 1000:.1f} ms" if len(cpu) > 1 else "")
             + f" in {posted.seconds:.1f} s on {os.cpu_count()} CPUs; the trivial app under {asgi_server(layout.env)}"
             f" {base_cpu / len(bodies) * 1000:.2f} ms",
             f"{name}/processing: the same messages, each answered (channel rules, a turn with the fake model)"
             f" and its reply sent to the fake Telegram; the rate runs from the first POST to the last reply"
             f" sent: {replied:,} of {len(unique):,} within {sizes.processing_timeout:.0f} s; CPU per message,"
             f" webhook to reply: " + " + ".join(f"{used / len(unique) * 1000:.1f} ms" for used in cpu_all)
             + (" (serve + worker)" if len(cpu_all) > 1 else " (serve)")]
    if not pg:
        notes.append(f"{name}/ingest: each delivery's processing and turn run in the same process as the"
                     " webhooks (the embedded worker), competing for its interpreter: accepted/s is the"
                     " webhook under that load")
    return rows, notes


# --- 2. fan-out ---------------------------------------------------------------------------------------


async def one_chat(watchers: Watchers, post: Callable[[str], Awaitable[None]], messages: int,
                   clients: int, replies: bool) -> list[str]:
    """Post `messages` one at a time, each waiting until every client has it (and, with
    `replies`, the reply); return the keys that did not reach every client."""
    missed = []
    for i in range(messages + 1):  # the first is a warm-up
        key = nonce()
        watchers.expect(key)
        await post(f"fan-out {i} [{key}]")
        if not await watchers.until(lambda: watchers.got(key) >= clients, WAIT):
            missed.append(key)
        if replies:
            await watchers.until(lambda: watchers.replies[key] >= clients, WAIT)
        await asyncio.sleep(0.05)
        if i == 0:
            watchers.latency_ms.pop(key)
    return missed


async def many_chats(watchers: Watchers, post: Callable[[int, str], Awaitable[None]],
                     chats: int) -> tuple[list[str], list[str]]:
    """Post one message in each chat, POST_AT_ONCE at a time; wait for every delivery.
    Returns (the keys, the keys missed)."""
    keys = [nonce() for _ in range(chats)]
    for key in keys:
        watchers.expect(key)
    gate = asyncio.Semaphore(POST_AT_ONCE)

    async def one(i: int) -> None:
        async with gate:
            await post(i, f"chat {i} [{keys[i]}]")

    await asyncio.gather(*(one(i) for i in range(chats)))
    await watchers.until(lambda: all(watchers.got(k) for k in keys), 2 * WAIT)
    return keys, [k for k in keys if not watchers.got(k)]


def deliveries(watchers: Watchers, keys: list[str] | None = None) -> list[float]:
    return [ms for key, values in watchers.latency_ms.items() if keys is None or key in keys for ms in values]


async def fanout_qorven(base: str, tokens: dict[str, Any], sizes: Sizes,
                        publish: Callable[[list[int], list[str]], Any] | None) -> dict[str, Any]:
    """The through-the-API cases; with `publish` (a layer other processes reach), each
    also once published by another process: the fan-out alone ("alone_one", "alone_many")."""
    ws_base = base.replace("http://", "ws://") + f"/ws/chat/{TENANT}/{QOR}/?token="
    api = f"{base}/v1/qors/{QOR}/messages"
    out: dict[str, Any] = {}
    async with client_session() as http:
        watchers = Watchers()
        try:
            started = time.monotonic()
            await watchers.connect([ws_base + tokens["owner"]] * CLIENTS, base)
            log(f"fan-out: {CLIENTS} sockets on one chat connected in {time.monotonic() - started:.1f} s")
            started = time.monotonic()
            missed = await one_chat(watchers, lambda text: post_json(http, api, {"content": text}, tokens["owner"]),
                                    sizes.fanout_messages, CLIENTS, replies=True)
            out["one"], out["one_missed"] = deliveries(watchers), len(missed)
            log(f"fan-out: {sizes.fanout_messages + 1} messages on one chat in {time.monotonic() - started:.1f} s")
            if publish is not None:
                before = set(watchers.latency_ms)
                missed = await one_chat(watchers, lambda text: asyncio.to_thread(publish, [-1], [nonce_of(text)]),
                                        sizes.fanout_messages, CLIENTS, replies=False)
                alone = [k for k in watchers.latency_ms if k not in before]
                out["alone_one"], out["alone_one_missed"] = deliveries(watchers, alone), len(missed)
        finally:
            await watchers.close()
        watchers = Watchers()
        try:
            started = time.monotonic()
            await watchers.connect([ws_base + t for t in tokens["users"][:CLIENTS]], base)
            log(f"fan-out: {CLIENTS} sockets on {CLIENTS} chats connected in {time.monotonic() - started:.1f} s")
            started = time.monotonic()

            async def post(i: int, text: str) -> None:
                await post_json(http, api, {"content": text}, tokens["users"][i])

            # Not waiting for the replies: the turns still running are stopped with the server.
            keys, missed = await many_chats(watchers, post, CLIENTS)
            out["many"], out["many_missed"] = deliveries(watchers, keys), len(missed)
            log(f"fan-out: a message in each of {CLIENTS} chats, delivered, in {time.monotonic() - started:.1f} s"
                f" ({sum(1 for k in keys if watchers.replies[k])} answered by then)")
            if publish is not None:
                # Once every turn has answered (a reply still to come would take the seq a
                # socket expects next, and send it to the database to catch up), the same
                # again from another process, POST_AT_ONCE chats at a time as the POSTs were.
                await watchers.until(lambda: all(watchers.replies[k] for k in keys), 2 * WAIT)
                alone = [nonce() for _ in range(CLIENTS)]
                for key in alone:
                    watchers.expect(key)
                for first in range(0, CLIENTS, POST_AT_ONCE):
                    batch = alone[first:first + POST_AT_ONCE]
                    await asyncio.to_thread(publish, list(range(first, first + len(batch))), batch)
                    await watchers.until(lambda: all(watchers.got(k) for k in batch), WAIT)
                out["alone_many"] = deliveries(watchers, alone)
                out["alone_many_missed"] = sum(1 for k in alone if not watchers.got(k))
        finally:
            await watchers.close()
    return out


async def fanout_baseline(base: str, sizes: Sizes) -> dict[str, Any]:
    ws_base = base.replace("http://", "ws://") + "/ws?chat="
    out: dict[str, Any] = {}
    async with client_session() as http:

        async def send(chat: int, text: str) -> None:
            await post_json(http, f"{base}/send?chat={chat}", {"type": "message.new", "role": "user", "content": text})

        watchers = Watchers()
        try:
            await watchers.connect([ws_base + "0"] * CLIENTS, None)
            missed = await one_chat(watchers, lambda text: send(0, text), sizes.fanout_messages, CLIENTS,
                                    replies=False)
            out["one"], out["one_missed"] = deliveries(watchers), len(missed)
        finally:
            await watchers.close()
        watchers = Watchers()
        try:
            await watchers.connect([ws_base + str(i) for i in range(CLIENTS)], None)
            keys, missed = await many_chats(watchers, send, CLIENTS)
            out["many"], out["many_missed"] = deliveries(watchers, keys), len(missed)
        finally:
            await watchers.close()
    return out


def broadcast_baseline(tmp: Path, env: dict[str, str], sizes: Sizes) -> dict[str, Any]:
    port = free_port()
    proc = spawn([sys.executable, str(BENCH_DIR / "_broadcast.py"), str(port)], env, tmp / "broadcast.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/health", [proc], 30, "the broadcast server")
        return asyncio.run(fanout_baseline(f"http://127.0.0.1:{port}", sizes))
    finally:
        stop(proc)


def fanout(layout: Layout, sizes: Sizes) -> tuple[list[Row], list[str]]:
    base = broadcast_baseline(layout.tmp, layout.env, sizes)
    layout.start("fanout")
    # On the in-process layer only the server itself can publish: no "alone" case there.
    publish = None if layout.name == "embedded" else (lambda users, keys: layout.helper("publish_alone", users=users,
                                                                                          keys=keys))
    try:
        measured = asyncio.run(fanout_qorven(layout.base, layout.tokens, sizes, publish))
    finally:
        layout.stop()
    rows: list[Row] = []
    notes: list[str] = []
    expected = {"one": sizes.fanout_messages * CLIENTS, "many": CLIENTS,
                "alone_one": sizes.fanout_messages * CLIENTS, "alone_many": CLIENTS}
    cases = [("one", "one", f"{CLIENTS} sockets on 1 chat"), ("many", "many", f"{CLIENTS} sockets on {CLIENTS} chats")]
    if publish is not None:
        cases += [("alone_one", "one", f"{CLIENTS} sockets on 1 chat, published by another process"),
                  ("alone_many", "many", f"{CLIENTS} sockets on {CLIENTS} chats, published by another process")]
    for case, base_case, what in cases:
        got = measured[case]
        if not got:
            notes.append(f"{layout.name}/fan-out {what}: no delivery at all")
            continue
        (p50, p99), (b50, b99) = pct(got, 2), pct(base[base_case], 2)
        complete = len(got) == expected[case]
        for name, value, b, limit in (("p50", p50, b50, 10), ("p99", p99, b99, 50)):
            rows.append(figure(layout.name, f"fan-out: {what}, {name}", value, unit="ms", baseline=b,
                               goal=f"≤ {limit} ms, ≤ 2× base",
                               ok=complete and value <= limit and (not b or value / b <= 2)))
        log(f"{layout.name}/fan-out {what}: p50 {p50} ms, p99 {p99} ms over {len(got)}/{expected[case]} deliveries"
            f" (base p50 {b50} ms, p99 {b99} ms)")
        if not complete:
            notes.append(f"{layout.name}/fan-out {what}: {len(got)}/{expected[case]} deliveries within {WAIT:.0f} s")
    notes.append(f"{layout.name}/fan-out: one chat: {sizes.fanout_messages} messages one at a time, each"
                 f" answered (the reply reaches the {CLIENTS} sockets too) before the next; {CLIENTS} chats: one"
                 f" message each, {POST_AT_ONCE} POSTs at a time, their turns running meanwhile (the phase ends"
                 " when every message is delivered); measured from the message's created_at, stamped before"
                 " its INSERT")
    if publish is not None:
        notes.append(f"{layout.name}/fan-out published by another process: the same sockets, messages stored"
                     " without their live event, then the event published by the bench's Django process"
                     " (as a worker publishes) and measured from that moment: the layer, the server's hub and"
                     f" the sockets alone, {POST_AT_ONCE} chats at a time, no turns")
    return rows, notes


# --- 3. turn overhead --------------------------------------------------------------------------------


@dataclass
class Turns:
    overhead_ms: list[float] = field(default_factory=list)
    model_ms: list[float] = field(default_factory=list)
    prompt_messages: list[int] = field(default_factory=list)  # what the model was sent, per turn
    post_ms: list[float] = field(default_factory=list)  # the POST's own round trip (message stored)
    model_requests: int = 0  # all requests the model had during the case (summaries, …)
    missed: int = 0

    def record(self, key: str, started: float, answered: float | None, model: FakeModel) -> None:
        """One turn, asked at `started` and answered at `answered` (perf_counter; None: no
        answer in time, counted at the time waited), less the model's own handling."""
        if answered is None:
            self.missed += 1
            self.overhead_ms.append((time.perf_counter() - started) * 1000)
            return
        model_ms = model.handled_ms.get(key, 0.0)
        self.model_ms.append(model_ms)
        self.prompt_messages.append(model.prompt_messages.get(key, 0))
        self.overhead_ms.append((answered - started) * 1000 - model_ms)


async def user_turns(http: Any, watchers: Watchers, api: str, token: str, n: int, model: FakeModel,
                     result: Turns, until: float) -> None:
    """n turns one after another: POST, then the reply's message.new on the chat's socket."""
    for i in range(n):
        if time.monotonic() > until:
            return
        key = nonce()
        watchers.expect(key)
        started = time.perf_counter()
        await post_json(http, api, {"content": f"turn {i} [{key}]"}, token)
        result.post_ms.append((time.perf_counter() - started) * 1000)
        replied = await watchers.until(lambda: key in watchers.reply_at, WAIT)
        result.record(key, started, watchers.reply_at[key] if replied else None, model)


async def platform_turns(base: str, sender: int, n: int, model: FakeModel, telegram: FakeTelegram,
                         result: Turns, until: float) -> None:
    """n Telegram turns one after another from paired `sender`: the webhook POSTed, then the
    reply's sendMessage arriving at the fake Telegram API."""
    url = f"{base}/v1/webhooks/telegram"
    async with client_session() as http:
        for _ in range(n):
            if time.monotonic() > until:
                return
            key = nonce()
            update = next(PLATFORM_UPDATES)
            body = telegram_update(update, sender, text=f"turn {update} [{key}]")
            started = time.perf_counter()
            async with http.post(url, data=body, headers=WEBHOOK_HEADERS) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"POST {url} answered {response.status}")
            result.post_ms.append((time.perf_counter() - started) * 1000)
            deadline = time.monotonic() + WAIT
            while key not in telegram.sent_at and time.monotonic() < deadline:
                await asyncio.sleep(0.001)  # the arrival's time is taken by the fake, not here
            result.record(key, started, telegram.sent_at.get(key), model)


async def platform_case(base: str, sender: int, turns: int, model: FakeModel, telegram: FakeTelegram,
                        warmup: int = 1) -> Turns:
    result, warm = Turns(), Turns()
    until = time.monotonic() + CASE_DEADLINE
    await platform_turns(base, sender, warmup, model, telegram, warm, until)
    requests = model.requests
    await platform_turns(base, sender, turns, model, telegram, result, until)
    result.model_requests = model.requests - requests
    return result


async def turn_case(base: str, tokens: list[str], turns_each: int, model: FakeModel, warmup: int = 1) -> Turns:
    """Each of `tokens`' users: a socket on their chat, `warmup` turns, then `turns_each`
    turns one after another (the users at the same time)."""
    ws_base = base.replace("http://", "ws://") + f"/ws/chat/{TENANT}/{QOR}/?token="
    api = f"{base}/v1/qors/{QOR}/messages"
    result, warm = Turns(), Turns()
    async with client_session() as http:
        watchers = Watchers()
        try:
            await watchers.connect([ws_base + t for t in tokens], base)
            until = time.monotonic() + CASE_DEADLINE
            await asyncio.gather(*(user_turns(http, watchers, api, t, warmup, model, warm, until) for t in tokens))
            requests = model.requests
            await asyncio.gather(*(user_turns(http, watchers, api, t, turns_each, model, result, until)
                                   for t in tokens))
            result.model_requests = model.requests - requests
        finally:
            await watchers.close()
    return result


async def turn_pair(base: str, tokens: tuple[str, str], turns_each: int, model: FakeModel,
                    warmup: int = 1) -> tuple[Turns, Turns]:
    """Two users, one turn of each in turn, `turns_each` each (after `warmup` each)."""
    ws_base = base.replace("http://", "ws://") + f"/ws/chat/{TENANT}/{QOR}/?token="
    api = f"{base}/v1/qors/{QOR}/messages"
    results, warm = (Turns(), Turns()), Turns()
    async with client_session() as http:
        watchers = Watchers()
        try:
            await watchers.connect([ws_base + t for t in tokens], base)
            until = time.monotonic() + CASE_DEADLINE
            for token in tokens:
                await user_turns(http, watchers, api, token, warmup, model, warm, until)
            requests = model.requests
            for _ in range(turns_each):
                for token, result in zip(tokens, results):
                    await user_turns(http, watchers, api, token, 1, model, result, until)
            for result in results:  # the requests of both, summaries included
                result.model_requests = model.requests - requests
        finally:
            await watchers.close()
    return results


@dataclass(frozen=True)
class TurnCase:
    name: str
    user: int  # index into the users' tokens (the first of `users` users)
    turns: int  # each
    users: int = 1
    fill: int = 0  # messages stored in the user's session just before (0: none added)
    warmup: int = 1  # turns each user takes first, not counted
    goal_ratio: float | None = None  # p50 within this many times the 1-user case's
    # The next case, measured at the same time: its user's turns alternate with this one's
    # (so a drift of the machine's speed during the run reaches both alike).
    alongside: bool = False
    platform: bool = False  # `user` is a paired Telegram sender, writing through the webhook


def turn_cases(sizes: Sizes) -> list[TurnCase]:
    return [
        TurnCase("1 user", SEQ_USER, sizes.turns, warmup=3),  # the first turns of fresh processes
        TurnCase("1 Telegram sender, webhook → sendMessage", PLATFORM_SENDER, sizes.turns, platform=True),
        TurnCase(f"{CONCURRENT_USERS} users at once, {sizes.turns_each} turn{'s' if sizes.turns_each > 1 else ''}"
                 " each", CONCURRENT_FIRST, sizes.turns_each, users=CONCURRENT_USERS, warmup=0),
        TurnCase(f"1 user, {label(sizes.mid)} messages in the session (prompt full)", MID_USER, sizes.turns,
                 fill=sizes.mid),
        TurnCase(f"1 user, {label(sizes.big)} messages in the session", BIG_USER, sizes.turns, fill=sizes.big,
                 goal_ratio=1.2, alongside=True),
        TurnCase(f"1 user, {label(sizes.big)} other rows in the table", OTHER_USER, sizes.turns, goal_ratio=1.2),
    ]


def turn_rows(layout: str, cases: list[tuple[TurnCase, Turns]]) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    notes: list[str] = []
    base50: float | None = None
    p50s: dict[str, float] = {}
    paired = {c.name for (a, _), (c, _) in zip(cases, cases[1:]) if a.alongside}
    paired |= {c.name for c, _ in cases if c.alongside}
    for case, result in cases:
        planned = case.turns * case.users
        asked = f"{result.model_requests} requests for {planned * (2 if case.name in paired else 1)} turns" + (
            " (this case's and the one alternated with it)" if case.name in paired else "")
        if not result.overhead_ms:
            notes.append(f"{layout}/turn {case.name}: no turn measured")
            continue
        p50, p99 = pct(result.overhead_ms, 2)
        whole = not result.missed and len(result.overhead_ms) == planned
        if case.name == "1 user":
            base50 = p50
        if case.name == "1 user" or case.platform:
            rows.append(figure(layout, f"turn: {case.name}, p50", p50, unit="ms", goal="≤ 25 ms", ok=whole and p50 <= 25))
        elif case.goal_ratio:
            rows.append(figure(layout, f"turn: {case.name}, p50", p50, unit="ms", baseline=base50,
                               goal=f"≤ {case.goal_ratio}× 1 user",
                               ok=whole and bool(base50) and p50 / base50 <= case.goal_ratio))
        else:
            rows.append(figure(layout, f"turn: {case.name}, p50", p50, unit="ms", baseline=base50))
        rows.append(figure(layout, f"turn: {case.name}, p99", p99, unit="ms"))
        model50 = pct(result.model_ms, 3)[0] if result.model_ms else 0.0
        prompt50 = pct([float(n) for n in result.prompt_messages], 0)[0] if result.prompt_messages else 0
        post50 = pct(result.post_ms, 1)[0]
        log(f"{layout}/turn {case.name}: p50 {p50} ms (of which the POST {post50} ms), p99 {p99} ms over"
            f" {len(result.overhead_ms)}/{planned} turns, {result.missed} missed; the model: p50 {model50} ms"
            f" (subtracted), {prompt50:.0f} messages a prompt, {asked}")
        notes.append(f"{layout}/turn {case.name}: p50 {p50} ms, of which the POST (message stored, turn queued)"
                     f" {post50} ms; the model was sent {prompt50:.0f} messages a turn (p50),"
                     f" {asked}")
        p50s[case.name] = p50
        if not whole:
            notes.append(f"{layout}/turn {case.name}: {len(result.overhead_ms)}/{planned} turns,"
                         f" {result.missed} without a reply in {WAIT:.0f} s (counted at the time waited)")
    for (case, _), (other, _) in zip(cases, cases[1:]):
        if case.alongside and case.name in p50s and other.name in p50s:
            rows.append(figure(layout, f"turn: {case.name} / a {SMALL_SESSION}-message session, turns alternated, p50",
                               p50s[case.name], unit="ms", baseline=p50s[other.name], goal=f"≤ {case.goal_ratio}×",
                               ok=p50s[case.name] / p50s[other.name] <= (case.goal_ratio or 0)))
    full = [c.name for c, _ in cases if c.fill and c.goal_ratio is None]  # the prompt-full session
    big = [c.name for c, _ in cases if c.fill and c.goal_ratio is not None]
    if full and big and full[0] in p50s and big[0] in p50s:
        notes.append(f"{layout}/turn: {big[0]} vs {full[0]}: p50 {p50s[big[0]] / p50s[full[0]]:.2f}× —"
                     " the stored history's size alone, both prompts full")
    return rows, notes


def turn(layout: Layout, sizes: Sizes, model: FakeModel, telegram: FakeTelegram) -> tuple[list[Row], list[str]]:
    tokens = layout.tokens["users"]
    done: list[tuple[TurnCase, Turns]] = []
    layout.start("turn")
    try:
        cases = iter(turn_cases(sizes))
        for case in cases:
            if case.fill:
                filled = layout.helper("fill_session", timeout=900, user_index=case.user, size=case.fill)
                log(f"{layout.name}/turn: filled a session with {label(case.fill)} messages in {filled['fill_s']} s"
                    f" (settled in {filled['settle_s']} s); {filled['messages']:,} messages in the table")
            if case.platform:
                first = next(PLATFORM_UPDATES)
                done.append((case, asyncio.run(platform_case(layout.base, case.user, case.turns, model, telegram,
                                                             warmup=case.warmup))))
                stages = layout.helper("platform_stages", sender=case.user, first_update=first)
                log(f"{layout.name}/turn {case.name}: p50 of each step: " + ", ".join(f"{k} {v} ms" for k, v in stages.items()))
            elif case.alongside:
                other = next(cases)
                pair = asyncio.run(turn_pair(layout.base, (tokens[case.user], tokens[other.user]), case.turns, model,
                                             warmup=case.warmup))
                done += [(case, pair[0]), (other, pair[1])]
            else:
                users = tokens[case.user:case.user + case.users]
                done.append((case, asyncio.run(turn_case(layout.base, users, case.turns, model,
                                                         warmup=case.warmup))))
            if case.fill:
                layout.helper("chat_close", user_index=case.user)
    finally:
        layout.stop()
    rows, notes = turn_rows(layout.name, done)
    notes.append(f"{layout.name}/turn: overhead = POST → the reply's message.new on the chat's socket (for the"
                 " Telegram sender: the webhook → the reply's sendMessage at the platform), minus the"
                 f" fake model's handling of that request; the 1-user and other-rows sessions start with"
                 f" {SMALL_SESSION} messages (and grow by 2 a turn); the prompt holds the newest messages that fit"
                 " QORVEN_NUM_CTX (8192 tokens by default)")
    return rows, notes


# --- one layout ---------------------------------------------------------------------------------------


class Layout(Servers):
    """One layout's processes (_servers.Servers), its database helper and the tokens."""

    def __init__(self, name: str, env: dict[str, str], tmp: Path, worker: bool, redis_url: str | None) -> None:
        super().__init__(name, env, tmp, worker, redis_url)
        self.helper: Helper | None = None
        self.tokens: dict[str, Any] = {}

    def start(self, label: str) -> None:
        self.helper("leftovers_clear")  # what the last phase's stopped processes left behind
        super().start(label)


def run_layout(layout: Layout, sizes: Sizes, phases: list[str], model: FakeModel,
               telegram: FakeTelegram) -> tuple[list[Row], list[str]]:
    if layout.redis_url:
        flush_redis(layout.redis_url)
    layout.helper = Helper(__file__, layout.env, layout.tmp / f"{layout.name}-helper.log")
    rows: list[Row] = []
    notes: list[str] = []
    try:
        started = time.monotonic()
        layout.tokens = layout.helper("setup")
        log(f"{layout.name}: migrated and set up {USERS} users, {SENDERS} paired senders in"
            f" {time.monotonic() - started:.1f} s")
        runs: dict[str, Callable[[], tuple[list[Row], list[str]]]] = {
            "ingest": lambda: ingest(layout, sizes), "fanout": lambda: fanout(layout, sizes),
            "turn": lambda: turn(layout, sizes, model, telegram)}
        for phase in phases:
            started = time.monotonic()
            try:
                phase_rows, phase_notes = runs[phase]()
            except Exception:
                log(f"{layout.name}/{phase} failed; server log tail:\n{layout.log_tail()}")
                raise
            rows += phase_rows
            notes += phase_notes
            log(f"{layout.name}/{phase}: done in {time.monotonic() - started:.1f} s")
        return rows, notes
    finally:
        layout.helper.close()
        layout.stop()


# --- parent ---------------------------------------------------------------------------------------


def layouts(tmp: Path, common: dict[str, str], wanted: list[str], pg_url: str, redis_url: str,
            notes: list[str], live_layer: str = "") -> list[Layout]:
    out = []
    if "embedded" in wanted:
        env = {**common, "DATABASE_URL": f"sqlite:///{tmp / 'embedded.sqlite3'}"}
        out.append(Layout("embedded", env, tmp, False, None))
    if "postgres+redis" in wanted:
        why_not = unreachable(pg_url, redis_url)
        if why_not:
            log(f"postgres+redis skipped: {why_not}")
            notes.append(f"postgres+redis: skipped, {why_not}")
        else:
            env = {**common, "DATABASE_URL": pg_url, "REDIS_URL": redis_url}
            if live_layer:
                env["QORVEN_LIVE_LAYER"] = live_layer
            notes.append(f"postgres+redis: the channel layer is QORVEN_LIVE_LAYER={live_layer or 'pubsub'}"
                         + ("" if live_layer else " (the default)"))
            out.append(Layout("postgres+redis", env, tmp, True, redis_url))
    return out


def show(rows: list[Row]) -> None:
    """The table, for a person reading stderr."""
    columns = ("layout", "figure", "measured", "baseline", "ratio", "goal", "met")
    cells = [[str(row.get(c) if row.get(c) is not None else "") for c in columns] for row in rows]
    widths = [max([len(c)] + [len(line[i]) for line in cells]) for i, c in enumerate(columns)]
    for line in [list(columns), *cells]:
        log("  ".join(cell.ljust(width) for cell, width in zip(line, widths)))


def parent(sizes: Sizes, quick: bool, phases: list[str], wanted: list[str], live_layer: str = "",
           server: str = "") -> int:
    pg_url = os.environ.get("BENCH_POSTGRES_URL", DEFAULT_PG_URL)
    redis_url = os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    kill_on_exit()
    rows: list[Row] = []
    notes: list[str] = []
    failed = False
    model, telegram = FakeModel(tag=NONCE), FakeTelegram(tag=NONCE)
    tmp = tempfile.TemporaryDirectory(prefix="qorven-bench-e2e-")
    chosen: list[Layout] = []
    began = time.monotonic()
    try:
        common = {**base_env(), "OPENAI_BASE_URL": model.url, "OPENAI_API_KEY": "bench-key",
                  "QORVEN_MODEL": "bench-model", "TELEGRAM_API_BASE": telegram.url}
        if server:
            common["QORVEN_ASGI_SERVER"] = server
        notes.append(f"qorven serve runs on {server or 'uvicorn (the default)'}")
        chosen = layouts(Path(tmp.name), common, wanted, pg_url, redis_url, notes, live_layer)
        for layout in chosen:
            started = time.monotonic()
            try:
                layout_rows, layout_notes = run_layout(layout, sizes, phases, model, telegram)
            except Exception as exc:
                log(f"{layout.name}: FAILED: {type(exc).__name__}: {exc}")
                notes.append(f"{layout.name}: FAILED ({type(exc).__name__}: {exc})")
                failed = True
                continue
            rows += layout_rows
            notes += layout_notes
            log(f"{layout.name}: done in {time.monotonic() - started:.0f} s")
    finally:
        stop_all()
        model.stop()
        telegram.stop()
        for layout in chosen:
            if layout.redis_url:
                drop_postgres(pg_url)
                flush_redis(layout.redis_url)
        tmp.cleanup()
    notes += [
        f"everything (servers, worker, PostgreSQL, Redis, the fakes and the clients) shares this machine's"
        f" {os.cpu_count()} CPUs; the clients are one asyncio process (aiohttp), as are the bases'",
        "embedded: one `qorven serve` on SQLite, tasks on its embedded worker;"
        " postgres+redis: `qorven serve` + `qorven worker --concurrency 4`",
    ]
    if quick:
        notes.append(f"--quick: {sizes.deliveries} deliveries, {sizes.fanout_messages} one-chat messages,"
                     f" {sizes.turns} turns, {label(sizes.big)} rows; the goals are for the full run")
    show(rows)
    for note in notes:
        log(note)
    log(f"finished in {time.monotonic() - began:.0f} s")
    print(json.dumps({"bench": "e2e", "rows": rows, "notes": notes}))
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run, about a minute a layout)")
    parser.add_argument("--only", default=",".join(PHASES), help=f"phases, comma-separated: {','.join(PHASES)}")
    parser.add_argument("--layout", choices=LAYOUTS, action="append", help="only this layout (repeatable)")
    parser.add_argument("--live-layer", choices=("lists", "pubsub"), default="",
                        help="QORVEN_LIVE_LAYER for postgres+redis (default: the server's own default, pubsub)")
    parser.add_argument("--server", choices=("daphne", "uvicorn"), default="",
                        help="QORVEN_ASGI_SERVER of qorven serve (default: the server's own default, uvicorn)")
    parser.add_argument("--profile", metavar="DIR", default="",
                        help="sample every server and worker with py-spy (pip install py-spy) into DIR")
    parser.add_argument("--helper", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.helper:
        return helper_main()
    phases = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        parser.error(f"unknown phase(s) {', '.join(unknown)}; have {', '.join(PHASES)}")
    _servers.PROFILE_DIR = args.profile
    return parent(QUICK if args.quick else FULL, args.quick, phases, args.layout or list(LAYOUTS), args.live_layer,
                  args.server)


if __name__ == "__main__":
    sys.exit(main())
