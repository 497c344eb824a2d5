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
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from sessions_app.models import Session

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/qorven_bench"
SIZES, QUICK_SIZES = (1_000, 100_000, 1_000_000), (1_000, 10_000, 100_000)
FILL_CHUNK = 100_000
# Appends per method, by --quick: at least N and S seconds of ours, in interleaved blocks.
APPENDS: dict[bool, tuple[int, float]] = {False: (500, 2.0), True: (200, 0.5)}
BLOCK = 100
READS, WARMUP = 200, 20
MESSAGE_COLUMNS = (
    "tenant_id, session_id, seq, role, content, channel, sender_name, created_at,"
    " external_scope, external_id, tool_calls, tool_call_id, metadata"
)
Row = dict[str, Any]


def log(message: str) -> None:
    print(f"[append_read] {message}", file=sys.stderr, flush=True)


def label(size: int) -> str:
    return f"{size // 1_000_000}M" if size >= 1_000_000 else f"{size // 1_000}k"


def met(ok: bool) -> str:
    return "met" if ok else "MISSED"


# --- parent: one subprocess per database -------------------------------------------------


def recreate_postgres(url: str) -> str | None:
    """Drop and recreate the bench database; return the reason if the server is unreachable."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    dbname = str(conninfo_to_dict(url).get("dbname") or "qorven_bench")
    admin = make_conninfo(url, dbname="postgres", connect_timeout=3)
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            name = sql.Identifier(dbname)
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(name))
    except psycopg.OperationalError as exc:
        return str(exc).strip().splitlines()[0]
    return None


def run_child(db: str, database_url: str, quick: bool) -> list[Row]:
    """Run this script with `--db db` against `database_url` and return its rows."""
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SECRET_KEY": "bench-not-a-secret"}
    env["DJANGO_DEBUG"] = "0"  # DEBUG would record every query
    cmd = [sys.executable, __file__, "--db", db, *(["--quick"] if quick else [])]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{db} run failed (exit {proc.returncode})")
    return list(json.loads(lines[-1])["rows"])


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
    rows: list[Row] = []
    notes: list[str] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="qorven-bench-") as tmp:
        targets = [("sqlite", f"sqlite:///{Path(tmp) / 'bench.sqlite3'}")]
        pg_url = os.environ.get("BENCH_POSTGRES_URL", DEFAULT_PG_URL)
        why_not = recreate_postgres(pg_url)
        if why_not is None:
            targets.append(("postgres", pg_url))
        else:
            log(f"PostgreSQL skipped: {pg_url} is unreachable ({why_not})")
            notes.append(f"postgres: skipped, {pg_url} unreachable")
        for db, url in targets:
            try:
                rows += run_child(db, url, quick)
            except (RuntimeError, ValueError, KeyError) as exc:
                log(str(exc))
                notes.append(f"{db}: FAILED ({exc})")
                failed = True
    notes = (goal_notes(rows, quick) if rows else []) + notes
    for note in notes:
        log(note)
    print(json.dumps({"bench": "append_read", "rows": rows, "notes": notes}))
    return 1 if failed else 0


# --- child: one database, Django configured for it ----------------------------------------


def fill(session: Session, size: int, pg: bool) -> float:
    """Insert `size` messages into `session` in big server-side batches; return seconds."""
    from django.db import connection, transaction

    from sessions_app.models import Message, Session

    if pg:
        cte, source = "", "generate_series(%s, %s) AS g(n)"
        created, metadata = "now() - (%s - n) * interval '1 second'", "'{}'::jsonb"
    else:  # a recursive CTE counts, so the whole batch runs inside SQLite
        cte = "WITH RECURSIVE g(n) AS (SELECT %s UNION ALL SELECT n + 1 FROM g WHERE n < %s) "
        source = "g"
        created, metadata = "datetime('now', '-' || (%s - n) || ' seconds')", "'{}'"
    insert = (
        f"{cte}INSERT INTO {Message._meta.db_table} ({MESSAGE_COLUMNS})"
        " SELECT %s, %s, n, CASE WHEN n %% 2 = 1 THEN 'user' ELSE 'assistant' END,"
        " 'bench message ' || n,"
        " CASE n %% 3 WHEN 0 THEN 'web' WHEN 1 THEN 'telegram' ELSE 'whatsapp' END,"
        f" '', {created}, '', '', NULL, '', {metadata} FROM {source}"
    )
    started = time.perf_counter()
    for first in range(1, size + 1, FILL_CHUNK):
        last = min(first + FILL_CHUNK - 1, size)
        row_args = [session.tenant_id, session.pk, size]
        params = row_args + [first, last] if pg else [first, last] + row_args
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(insert, params)
        if size > FILL_CHUNK:
            elapsed = time.perf_counter() - started
            log(f"{'postgres' if pg else 'sqlite'}: fill {label(size)}: {last:,} rows ({elapsed:.1f} s)")
    Session.objects.filter(pk=session.pk).update(last_seq=size)
    session.last_seq = size
    return time.perf_counter() - started


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
    from sessions_app.services import message_append

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

    ours_ms = timings(lambda: len(messages_read(session=session, channel="telegram", limit=50)))
    raw_ms = timings(read_raw)
    return {
        "read_p50_ms": round(statistics.median(ours_ms), 3),
        "read_p99_ms": round(statistics.quantiles(ours_ms, n=100)[98], 3),
        "raw_read_p50_ms": round(statistics.median(raw_ms), 3),
        "raw_read_p99_ms": round(statistics.quantiles(raw_ms, n=100)[98], 3),
    }


def child(quick: bool) -> int:
    """Bench the database of $DATABASE_URL and print its rows."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qorven.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from qorven.services import tenant_bootstrap
    from sessions_app.models import Message
    from sessions_app.services import session_resolve

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
    # Settle the fill's aftermath now rather than during the measurements: PostgreSQL's
    # autovacuum would soon analyze the table, and both would checkpoint the WAL it wrote.
    with connection.cursor() as cursor:
        if pg:
            cursor.execute("VACUUM ANALYZE")
            cursor.execute("CHECKPOINT")
        else:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
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
