"""bench/e2e.py's ingest phase: webhooks accepted and stored, and their processing."""
from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import Row, log
from _servers import (
    Helper,
    cpu_seconds,
    free_port,
    spawn,
    stop,
    wait_http,
)

# --- 1. ingest -------------------------------------------------------------------------------------
from _e2e.clients import client_session
from _e2e.common import (
    BENCH_DIR,
    CONCURRENCY,
    DAPHNE,
    Layout,
    SENDERS,
    Sizes,
    T,
    TG_BASE_ID,
    TG_SECRET,
    figure,
)


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
