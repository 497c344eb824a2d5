"""Append and per-channel read cost of the conversation store as sessions grow.

Usage: ``python bench/append_read.py [--quick]`` (normally through ``bench/run.py``).

Runs on SQLite (always, in a fresh temporary file, never the dev db.sqlite3) and on
PostgreSQL when reachable at ``$BENCH_POSTGRES_URL`` (default
``postgres://postgres@127.0.0.1:5432/qorven_bench``; that database is dropped and
recreated at the start of each run). Settings are read once per process, so each database
runs in its own subprocess (``--db sqlite|postgres``) and this parent merges their rows.

Per database: one canonical session per size (1k, 100k, 1M messages; --quick: 1k, 10k,
100k), bulk-filled server-side with channels cycling web/telegram/whatsapp. All sessions
are filled first, so every size is measured against the same table and only the session
length varies. Then:

- appends/s of ``message_append`` (autocommit, the service opens its own transaction)
  against a raw locked single-row insert on the DB-API connection (BEGIN; SELECT last_seq
  [FOR UPDATE]; UPDATE; INSERT; COMMIT), in blocks of 100 rotating over sizes and methods
  so drift hits all alike, until each size's ours made >= 500 appends over >= 2 s
  (--quick: 200 and 0.5 s);
- latency of ``messages_read(channel="telegram", limit=50)`` (p50/p99 over 200 calls)
  against the raw ``SELECT * ... ORDER BY seq DESC LIMIT 50``.

Progress goes to stderr; the last stdout line is the JSON result of bench/run.py's protocol.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from _common import (
    MESSAGE_COLUMNS,
    Row,
    django_setup,
    fill,
    label,
    log,
    met,
    percentiles,
    run_databases,
    settle,
)

if TYPE_CHECKING:
    from sessions_app.models import Session

DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/qorven_bench"
SIZES, QUICK_SIZES = (1_000, 100_000, 1_000_000), (1_000, 10_000, 100_000)
# Appends per method, by --quick: at least N and S seconds of ours, in interleaved blocks.
APPENDS: dict[bool, tuple[int, float]] = {False: (500, 2.0), True: (200, 0.5)}
BLOCK = 100
READS, WARMUP = 200, 20


# --- parent: one subprocess per database -------------------------------------------------


def goal_notes(rows: list[Row], quick: bool) -> list[str]:
    """The goals beside the figures; reported, not asserted."""
    notes = []
    for db in dict.fromkeys(row["db"] for row in rows):
        mine = sorted((r for r in rows if r["db"] == db), key=lambda r: r["size"])
        first, last = mine[0], mine[-1]
        ratio = min(r["append_ratio"] for r in mine)
        flat = last["ours_append_per_s"] / first["ours_append_per_s"]
        span = f"{label(last['size'])}/{label(first['size'])}"
        p50, p99 = last["read_p50_ms"], last["read_p99_ms"]
        goal = f"goal < 2 ms: {met(p50 < 2)}" if db == "postgres" else "2 ms goal is for PostgreSQL"
        at = label(last["size"])
        notes += [
            f"{db}: append ratio ours/raw, worst size: {ratio:.2f}"
            f" (goal >= 0.5: {met(ratio >= 0.5)})",
            f"{db}: append flatness {span} = {flat:.2f}"
            f" (goal within 1.2x: {met(1 / 1.2 <= flat <= 1.2)})",
            f"{db}: channel read at {at}: p50 {p50:.2f} ms, p99 {p99:.2f} ms ({goal})",
        ]
    if quick:
        notes.append("--quick: the largest size is 100k, not 1M; the goals are for the full run")
    return notes


def parent(quick: bool) -> int:
    pg_url = os.environ.get("BENCH_POSTGRES_URL", DEFAULT_PG_URL)
    rows, notes, failed = run_databases(__file__, pg_url, quick)
    notes = (goal_notes(rows, quick) if rows else []) + notes
    for note in notes:
        log(note)
    print(json.dumps({"bench": "append_read", "rows": rows, "notes": notes}))
    return 1 if failed else 0


# --- child: one database, Django configured for it ----------------------------------------


def raw_append(session: Session, pg: bool) -> Callable[[int], None]:
    """The baseline: a locked single-row insert with seq allocation on the DB-API connection."""
    from django.db import connection

    from sessions_app.models import Message, Session

    connection.ensure_connection()
    cursor = connection.connection.cursor()  # in autocommit: we BEGIN/COMMIT ourselves
    p, begin, lock = ("%s", "BEGIN", " FOR UPDATE") if pg else ("?", "BEGIN IMMEDIATE", "")
    sessions = Session._meta.db_table
    select = f"SELECT last_seq FROM {sessions} WHERE id = {p}{lock}"
    update = f"UPDATE {sessions} SET last_seq = {p} WHERE id = {p}"
    insert = (
        f"INSERT INTO {Message._meta.db_table} ({MESSAGE_COLUMNS}) VALUES"
        f" ({p}, {p}, {p}, 'user', {p}, 'telegram', '', {p}, '', '', NULL, '', '{{}}')"
    )

    def append(i: int) -> None:
        now = datetime.now(UTC)
        created = now if pg else now.replace(tzinfo=None).isoformat(" ")  # Django's format
        cursor.execute(begin)
        try:
            cursor.execute(select, (session.pk,))
            seq = int(cursor.fetchone()[0]) + 1
            cursor.execute(update, (seq, session.pk))
            cursor.execute(insert, (session.tenant_id, session.pk, seq, f"raw {i}", created))
        except BaseException:
            cursor.execute("ROLLBACK")
            raise
        cursor.execute("COMMIT")

    return append


def timings(read: Callable[[], int]) -> list[float]:
    """Milliseconds per call over READS calls after a warmup; each call must return 50 rows."""
    for _ in range(WARMUP):
        read()
    result = []
    for _ in range(READS):
        started = time.perf_counter_ns()
        n = read()
        result.append((time.perf_counter_ns() - started) / 1e6)
        if n != 50:
            raise AssertionError(f"read returned {n} messages, expected 50")
    return result


def measure_appends(sessions: dict[int, Session], pg: bool, quick: bool) -> dict[int, Row]:
    """Appends/s, ours and raw, per size.

    Blocks of BLOCK appends rotate over every (size, method), so load from elsewhere and
    drift over time hit all sizes and both methods alike; rounds go on until every size's
    ours made at least N appends in at least S seconds (APPENDS).
    """
    from sessions_app.services.append import message_append

    def ours(session: Session) -> Callable[[int], None]:
        def append(i: int) -> None:
            message_append(session=session, role="user", content=f"bench {i}", channel="telegram")

        return append

    methods = {size: {"ours": ours(s), "raw": raw_append(s, pg)} for size, s in sessions.items()}
    spent = {size: {"ours": 0.0, "raw": 0.0} for size in sessions}
    for pair in methods.values():
        for append in pair.values():
            for i in range(WARMUP):
                append(i)
    at_least, seconds = APPENDS[quick]
    done = 0
    while done < at_least or min(s["ours"] for s in spent.values()) < seconds:
        for size, pair in methods.items():
            for name, append in pair.items():
                started = time.perf_counter()
                for i in range(done, done + BLOCK):
                    append(i)
                spent[size][name] += time.perf_counter() - started
        done += BLOCK
    log(f"{done:,} appends per size and method")
    return {
        size: {
            "ours_append_per_s": round(done / s["ours"], 1),
            "raw_append_per_s": round(done / s["raw"], 1),
            "append_ratio": round(s["raw"] / s["ours"], 3),
        }
        for size, s in spent.items()
    }


def measure_reads(session: Session, pg: bool) -> Row:
    """Latency of the last 50 telegram messages: messages_read and the raw query."""
    from django.db import connection

    from sessions_app.models import Message
    from sessions_app.selectors import messages_read

    cursor = connection.connection.cursor()
    p = "%s" if pg else "?"
    query = (
        f"SELECT * FROM {Message._meta.db_table} WHERE session_id = {p} AND channel = {p}"
        " ORDER BY seq DESC LIMIT 50"
    )

    def read_raw() -> int:
        cursor.execute(query, (session.pk, "telegram"))
        return len(cursor.fetchall())

    ours_p50, ours_p99 = percentiles(
        timings(lambda: len(messages_read(session=session, channel="telegram", limit=50)))
    )
    raw_p50, raw_p99 = percentiles(timings(read_raw))
    return {
        "read_p50_ms": ours_p50,
        "read_p99_ms": ours_p99,
        "raw_read_p50_ms": raw_p50,
        "raw_read_p99_ms": raw_p99,
    }


def child(quick: bool) -> int:
    """Bench the database of $DATABASE_URL and print its rows."""
    django_setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from sessions_app.models import Message
    from sessions_app.services.resolve import session_resolve
    from tenancy.services import tenant_bootstrap

    pg = connection.vendor == "postgresql"
    name = "postgres" if pg else connection.vendor
    call_command("migrate", verbosity=0)
    boot = tenant_bootstrap(tenant_slug="bench", qor_slug="bench", owner_username="bench-owner")
    sizes = QUICK_SIZES if quick else SIZES
    sessions: dict[int, Session] = {}
    fill_s: dict[int, float] = {}
    for size in sizes:
        user = get_user_model().objects.create(username=f"bench-{size}")
        sessions[size] = session_resolve(tenant=boot.tenant, qor=boot.qor, channel="web", user=user)
        fill_s[size] = fill(sessions[size], size, pg)
        log(f"{name}: filled {label(size)} in {fill_s[size]:.1f} s")
    settle(pg)
    log(f"{name}: measuring appends (sizes interleaved)")
    appends = measure_appends(sessions, pg, quick)
    rows: list[Row] = []
    for size, session in sessions.items():
        log(f"{name}: measuring reads at {label(size)}")
        row = {"db": name, "size": size, **appends[size], **measure_reads(session, pg)}
        base = appends[sizes[0]]["ours_append_per_s"]
        row["append_flat"] = round(row["ours_append_per_s"] / base, 3)
        row["fill_s"] = round(fill_s[size], 2)
        top = Message.objects.filter(session=session).order_by("-seq").values_list("seq", flat=True)
        session.refresh_from_db(fields=["last_seq"])
        if top.first() != session.last_seq:
            raise AssertionError(f"seq drift: max seq {top.first()} != last {session.last_seq}")
        rows.append(row)
        log(f"{name}: {json.dumps(row)}")
    print(json.dumps({"bench": "append_read", "rows": rows}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes 1k/10k/100k, fewer appends")
    parser.add_argument("--db", choices=["sqlite", "postgres"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    return child(args.quick) if args.db else parent(args.quick)


if __name__ == "__main__":
    sys.exit(main())
