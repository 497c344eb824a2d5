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
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import _servers
from _common import Row, label, log
from _servers import (
    FakeModel,
    FakeTelegram,
    Helper,
    base_env,
    drop_postgres,
    flush_redis,
    kill_on_exit,
    stop_all,
    unreachable,
)
from _e2e.common import (
    DEFAULT_PG_URL,
    DEFAULT_REDIS_URL,
    FULL,
    LAYOUTS,
    Layout,
    NONCE,
    PHASES,
    QUICK,
    SENDERS,
    Sizes,
    USERS,
)
from _e2e.fanout import fanout
from _e2e.helper import helper_main
from _e2e.ingest import ingest
from _e2e.turn import turn


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
    if args.profile and not _servers.PY_SPY.exists():
        parser.error(f"--profile needs py-spy beside this Python: {Path(sys.executable).with_name('pip')} install py-spy")
    _servers.PROFILE_DIR = args.profile
    return parent(QUICK if args.quick else FULL, args.quick, phases, args.layout or list(LAYOUTS), args.live_layer,
                  args.server)


if __name__ == "__main__":
    sys.exit(main())
