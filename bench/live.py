"""Live updates over the Redis channel layer: webhook POST → every page socket.

Usage: ``python bench/live.py [--quick] [--clients N]``

Starts `qorven serve` (Daphne, Redis channel layer, tasks in process, a temporary SQLite
database) on loopback, connects N WebSocket clients (default 200) to one person's chat,
and posts Telegram webhooks for that person:

- latency: one message at a time; from the POST to the moment the last of the N clients
  has the `message.new` (p50, p99), and per delivery;
- sustained: a burst posted 8 at a time; messages per second until every client has
  every message (each message also gets an offline-provider reply, so ~4 events go to
  each client per message).

The base of the ratio is the raw Redis PUBLISH → SUBSCRIBE round trip, measured in the
same run against the same Redis. Everything stays on 127.0.0.1 (the fake Telegram API
included); every wait is bounded. Progress goes to stderr; the last stdout line is
{"bench": "live", "rows": [...], "notes": [...]}.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QORVEN = Path(sys.executable).with_name("qorven")

SETUP = """
from django.core.management import call_command
from channels_app.models import Identity
from tenancy.models import Tenant
from tenancy.services import api_token_create
from django.contrib.auth import get_user_model
call_command("migrate", verbosity=0)
call_command("bootstrap", tenant="acme", qor="aria", owner="alice", verbosity=0, stdout=open("/dev/null", "w"))
call_command("bind", "telegram", "--tenant", "acme", "--qor", "aria", "--token", "111:AAA", "--secret", "bench-secret",
             stdout=open("/dev/null", "w"))
tenant, alice = Tenant.objects.get(slug="acme"), get_user_model().objects.get(username="alice")
Identity.objects.create(tenant=tenant, channel="telegram", external_id="42", user=alice, approval="approved",
                        trust_level="owner", display_name="Alice")
from tenancy.models import Qor
from sessions_app.services import message_append, session_resolve
# The chat exists already, as it does for anyone who has used it: the sockets watch its session.
session = session_resolve(tenant=tenant, qor=Qor.objects.get(tenant=tenant, slug="aria"), channel="web", user=alice)
message_append(session=session, role="assistant", content="Hello!", channel="web", notify=False)
print("TOKEN", api_token_create(tenant=tenant, user=alice)[1])
"""


def log(message: str) -> None:
    print(f"[live] {message}", file=sys.stderr, flush=True)


def pct(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return (round(values[0], 3), round(values[0], 3)) if values else (0.0, 0.0)
    return round(statistics.median(values), 3), round(statistics.quantiles(values, n=100)[98], 3)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeTelegram:
    """sendMessage answers ok, so replies are 'delivered' without leaving the machine."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = b'{"ok": true, "result": {"message_id": 1}}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        self.httpd.shutdown()


async def redis_round_trip(url: str, samples: int) -> list[float]:
    """Milliseconds from PUBLISH to the subscriber having the message, one at a time."""
    import redis.asyncio as redis

    sub_client, pub_client = redis.from_url(url), redis.from_url(url)
    pubsub = sub_client.pubsub()
    await pubsub.subscribe("qorven-bench-live")
    await pubsub.get_message(timeout=1.0)  # the subscribe confirmation
    out = []
    for _ in range(samples):
        started = time.perf_counter()
        await pub_client.publish("qorven-bench-live", "x")
        while True:
            message = await pubsub.get_message(timeout=2.0)
            if message is None:
                raise RuntimeError("Redis did not deliver a published message within 2 s")
            if message["type"] == "message":
                break
        out.append((time.perf_counter() - started) * 1000)
    await pubsub.aclose()
    await sub_client.aclose()
    await pub_client.aclose()
    return out


class Clients:
    """N sockets on one chat, recording when each sees each bench message."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.seen: dict[str, list[float]] = {}
        self.stored: dict[str, float] = {}  # content → the message's created_at (epoch seconds)
        self.seqs: dict[str, int] = {}
        self.answered: set[int] = set()  # user seqs whose reply a client has seen
        self.changed = asyncio.Event()

    async def run(self, session, url: str, origin: str, ready: asyncio.Event, counter: list[int],
                  gate: asyncio.Semaphore) -> None:
        async with gate:  # connect a few at a time, as page loads would
            for attempt in range(5):
                try:
                    ws = await session.ws_connect(url, headers={"Origin": origin}, heartbeat=None, max_msg_size=0)
                    break
                except Exception:
                    if attempt == 4:
                        raise
                    await asyncio.sleep(0.5 * (attempt + 1))
        async with ws:
            counter[0] += 1
            if counter[0] == self.n:
                ready.set()
            async for frame in ws:
                event = json.loads(frame.data)
                if event.get("type") == "message.new" and event.get("role") == "assistant":
                    self.answered.add(event.get("reply_to") or 0)
                if event.get("type") == "message.new" and event.get("role") == "user":
                    self.seqs[event["content"]] = event["seq"]
                    self.seen.setdefault(event["content"], []).append(time.perf_counter())
                    self.stored[event["content"]] = datetime.fromisoformat(event["created_at"]).timestamp()
                    self.changed.set()

    async def wait_for(self, contents: list[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while any(len(self.seen.get(c, [])) < self.n for c in contents):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))
            except asyncio.TimeoutError:
                pass
        return True


def update(text: str, message_id: int) -> bytes:
    return json.dumps({
        "update_id": message_id,
        "message": {"message_id": message_id, "date": int(time.time()), "text": text,
                    "from": {"id": 42, "is_bot": False, "first_name": "Alice"},
                    "chat": {"id": 42, "type": "private", "first_name": "Alice"}},
    }).encode()


async def measure(base: str, token: str, n_clients: int, n_latency: int, n_burst: int) -> dict:
    import aiohttp

    port = base.rsplit(":", 1)[1]
    ws_url = f"ws://127.0.0.1:{port}/ws/chat/acme/aria/?token={token}"
    clients = Clients(n_clients)
    ready, counter = asyncio.Event(), [0]
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        gate = asyncio.Semaphore(20)
        tasks = [asyncio.create_task(clients.run(http, ws_url, base, ready, counter, gate)) for _ in range(n_clients)]
        await asyncio.wait_for(ready.wait(), 120)
        log(f"{n_clients} clients connected")
        headers = {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": "bench-secret"}

        async def post(text: str, mid: int) -> float:
            started = time.perf_counter()
            async with http.post(f"{base}/v1/webhooks/telegram", data=update(text, mid), headers=headers) as r:
                if r.status != 200:
                    raise RuntimeError(f"webhook answered {r.status}")
                await r.read()
            return started

        # warm-up: first turn, first broadcast, connection pools
        await post("bench warm-up", 1)
        if not await clients.wait_for(["bench warm-up"], 120):
            got = len(clients.seen.get("bench warm-up", []))
            raise RuntimeError(f"the warm-up message reached {got}/{n_clients} clients in 120 s")

        all_clients, per_delivery, to_store = [], [], []
        for i in range(n_latency):
            text = f"bench latency {i}"
            wall = time.time()
            started = await post(text, 100 + i)
            if not await clients.wait_for([text], 30):
                raise RuntimeError(f"{text!r} reached {len(clients.seen.get(text, []))}/{n_clients} clients in 30 s")
            times = clients.seen[text]
            to_store.append((clients.stored[text] - wall) * 1000)
            all_clients.append((max(times) - started) * 1000)
            per_delivery += [(t - started) * 1000 for t in times]
            # Let the turn that answers it finish, so the next message does not queue behind it.
            deadline = time.monotonic() + 30
            while clients.seqs[text] not in clients.answered and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            if (i + 1) % 10 == 0:
                log(f"latency: {i + 1}/{n_latency} messages")

        texts = [f"bench burst {i}" for i in range(n_burst)]
        started = time.perf_counter()
        in_flight = asyncio.Semaphore(8)

        async def post_limited(i: int) -> None:
            async with in_flight:
                await post(texts[i], 10_000 + i)

        await asyncio.gather(*(post_limited(i) for i in range(n_burst)))
        posted = time.perf_counter() - started
        if not await clients.wait_for(texts, 300):
            raise RuntimeError("the burst did not reach every client in 300 s")
        finished = max(max(clients.seen[t]) for t in texts) - started
        log(f"burst: {n_burst} messages posted in {posted:.2f} s, on every client after {finished:.2f} s")
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {"all_clients": all_clients, "per_delivery": per_delivery, "to_store": to_store, "burst_seconds": finished,
            "burst": n_burst}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages (a smoke run)")
    parser.add_argument("--clients", type=int, default=200, help="WebSocket clients (default 200)")
    args = parser.parse_args()
    n_latency, n_burst = (10, 20) if args.quick else (50, 200)
    redis_url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    redis_url = redis_url.rsplit("/", 1)[0] + "/8"  # a database of its own
    notes: list[str] = []
    try:
        import redis

        redis.from_url(redis_url, socket_connect_timeout=2).ping()
    except Exception as exc:
        log(f"Redis unreachable at {redis_url}: {exc}")
        print(json.dumps({"bench": "live", "rows": [], "notes": [f"skipped: Redis unreachable ({exc})"]}))
        return 0

    log("Redis PUBLISH→SUBSCRIBE round trip")
    base_ms = asyncio.run(redis_round_trip(redis_url, 200 if args.quick else 1000))
    telegram = FakeTelegram()
    tmp = tempfile.TemporaryDirectory(prefix="qorven-bench-live-")
    port = free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{Path(tmp.name) / 'live.sqlite3'}",
           "DJANGO_SECRET_KEY": "bench-not-a-secret", "REDIS_URL": redis_url, "CELERY_BROKER_URL": "",
           "TELEGRAM_API_BASE": telegram.url, "OPENAI_BASE_URL": "", "QORVEN_MODEL": "",
           "QORVEN_LOG_LEVEL": "WARNING", "DJANGO_DEBUG": "0"}
    log("setting up a tenant, a Telegram binding and a paired sender")
    setup = subprocess.run([str(QORVEN), "shell", "-c", SETUP], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
    if setup.returncode != 0:
        log(setup.stderr[-2000:])
        return 1
    token = next(line.split()[1] for line in setup.stdout.splitlines() if line.startswith("TOKEN "))
    server_log = open(Path(tmp.name) / "server.log", "w")
    server = subprocess.Popen([str(QORVEN), "serve", "--no-migrate", "--port", str(port)], cwd=ROOT, env=env,
                              stdout=server_log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        import urllib.request

        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(base + "/accounts/login/", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log("the server did not start")
                    return 1
                time.sleep(0.3)
        log(f"server on {base}; connecting {args.clients} clients")
        result = asyncio.run(measure(base, token, args.clients, n_latency, n_burst))
    except Exception:
        server_log.flush()
        log("server log (tail):\n" + (Path(tmp.name) / "server.log").read_text()[-3000:])
        raise
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        server_log.close()
        telegram.stop()
        tmp.cleanup()

    redis_p50, redis_p99 = pct(base_ms)
    all_p50, all_p99 = pct(result["all_clients"])
    one_p50, one_p99 = pct(result["per_delivery"])
    rate = result["burst"] / result["burst_seconds"]
    rows = [
        {"measure": "Redis PUBLISH→SUBSCRIBE round trip (base)", "p50 ms": redis_p50, "p99 ms": redis_p99,
         "ratio p50": 1.0},
        {"measure": f"webhook POST → message.new on all {args.clients} clients", "p50 ms": all_p50,
         "p99 ms": all_p99, "ratio p50": round(all_p50 / redis_p50, 1) if redis_p50 else None},
        {"measure": "of which webhook POST → message stored", "p50 ms": pct(result["to_store"])[0],
         "p99 ms": pct(result["to_store"])[1]},
        {"measure": "webhook POST → message.new, per delivery", "p50 ms": one_p50, "p99 ms": one_p99,
         "ratio p50": round(one_p50 / redis_p50, 1) if redis_p50 else None},
        {"measure": f"sustained: {result['burst']} webhooks to all {args.clients} clients",
         "msgs/s": round(rate, 1), "deliveries/s": round(rate * args.clients)},
    ]
    notes += [
        "one Daphne process (qorven serve), Redis channel layer, tasks in process, SQLite; loopback only",
        "each webhook message is stored, broadcast, and answered by the offline provider (reply, done: more events)",
    ]
    print(json.dumps({"bench": "live", "rows": rows, "notes": notes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
