"""What the benchmarks share: logging, the parent's one-subprocess-per-database run, the
child's Django setup, an in-process benchmark's arguments and alternated timing, and the server-side fill of a session with N messages.

Not a benchmark itself: bench/run.py skips files starting with ``_``. A benchmark imports
it as ``_common`` (``python bench/x.py`` puts bench/ first on sys.path).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sessions_app.models import Session

ROOT = Path(__file__).resolve().parent.parent
# The running benchmark's name (its script's stem), for the log prefix.
BENCH = Path(sys.argv[0]).stem
FILL_CHUNK = 100_000
MESSAGE_COLUMNS = (
    "tenant_id, session_id, seq, role, content, channel, sender_name, created_at,"
    " external_scope, external_id, tool_calls, tool_call_id, metadata"
)
# Defaults of fill(): SQL over the row number `n`, with % doubled (the query has parameters).
ALTERNATING_ROLES = "CASE WHEN n %% 2 = 1 THEN 'user' ELSE 'assistant' END"
NUMBERED_CONTENT = "'bench message ' || n"
Row = dict[str, Any]


def log(message: str) -> None:
    print(f"[{BENCH}] {message}", file=sys.stderr, flush=True)


def label(size: int) -> str:
    if size >= 1_000_000:
        return f"{size // 1_000_000}M"
    return f"{size // 1_000}k" if size >= 1_000 else str(size)


def met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def percentiles(ms: list[float]) -> tuple[float, float]:
    """(p50, p99) of a list of milliseconds, rounded to microseconds."""
    return round(statistics.median(ms), 3), round(statistics.quantiles(ms, n=100)[98], 3)


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


def run_child(script: str, db: str, database_url: str, quick: bool) -> dict[str, Any]:
    """Run `script --db db` against `database_url` and return its JSON result."""
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SECRET_KEY": "bench-not-a-secret"}
    env["DJANGO_DEBUG"] = "0"  # DEBUG would record every query
    cmd = [sys.executable, script, "--db", db, *(["--quick"] if quick else [])]
    proc = subprocess.run(cmd, check=False, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{db} run failed (exit {proc.returncode})")
    return dict(json.loads(lines[-1]))


def run_databases(script: str, pg_url: str, quick: bool) -> tuple[list[Row], list[str], bool]:
    """Run `script`'s child on SQLite (a fresh temporary file) and on PostgreSQL at `pg_url`
    (dropped and recreated first; skipped with a note when unreachable).

    Returns (rows, notes, failed): the children's rows and notes, plus a note for each
    database skipped or failed.
    """
    rows: list[Row] = []
    notes: list[str] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="qorven-bench-") as tmp:
        targets = [("sqlite", f"sqlite:///{Path(tmp) / 'bench.sqlite3'}")]
        why_not = recreate_postgres(pg_url)
        if why_not is None:
            targets.append(("postgres", pg_url))
        else:
            log(f"PostgreSQL skipped: {pg_url} is unreachable ({why_not})")
            notes.append(f"postgres: skipped, {pg_url} unreachable")
        for db, url in targets:
            try:
                result = run_child(script, db, url, quick)
                rows += list(result["rows"])
                notes += [str(note) for note in result.get("notes", [])]
            except (RuntimeError, ValueError, KeyError) as exc:
                log(str(exc))
                notes.append(f"{db}: FAILED ({exc})")
                failed = True
    return rows, notes, failed


# --- child: one database, Django configured for it ----------------------------------------


def django_setup() -> None:
    """Configure Django for $DATABASE_URL (set by run_child)."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qorven.settings")
    import django

    django.setup()


def in_process_args(doc: str) -> argparse.Namespace:
    """The arguments of a benchmark that times functions in its own process, with Django
    set up on the settings' default database (none is used): its `--quick`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls, for a smoke run")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-not-a-secret")
    os.environ.pop("DATABASE_URL", None)
    django_setup()
    return args


def alternated_p50(cases: dict[str, Callable[[], object]], calls: int) -> dict[str, float]:
    """The p50 in ms of each case over `calls` calls, the cases taken in turn and in the
    other order every other round (so a drift of the machine falls on each alike), after
    a first round that warms up; a full collection before each call."""
    ms: dict[str, list[float]] = {name: [] for name in cases}
    for round_ in range(calls + 1):
        for name in sorted(cases, reverse=round_ % 2 == 1):
            gc.collect()
            started = time.perf_counter()
            cases[name]()
            if round_:
                ms[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(times) for name, times in ms.items()}


def settle(pg: bool) -> None:
    """Settle a fill's aftermath now rather than during the measurements: statistics for
    the planner (PostgreSQL's autovacuum would soon analyze the table anyway) and a
    checkpoint of the WAL the fill wrote."""
    from django.db import connection

    with connection.cursor() as cursor:
        if pg:
            cursor.execute("VACUUM ANALYZE")
            cursor.execute("CHECKPOINT")
        else:
            cursor.execute("ANALYZE")
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def fill(
    session: Session,
    size: int,
    pg: bool,
    *,
    role: str = ALTERNATING_ROLES,
    content: str = NUMBERED_CONTENT,
) -> float:
    """Insert `size` messages into `session` in big server-side batches; return seconds.

    `role` and `content` are SQL expressions over the row's seq `n` (1 … size), with `%`
    written `%%`. Channels cycle web/telegram/whatsapp; created_at is one second apart,
    ending now.
    """
    from django.db import connection, transaction

    from sessions_app.models import Message, Session

    if pg:
        cte, source = "", "generate_series(%s::bigint, %s::bigint) AS g(n)"  # typed: the server binds them
        created, metadata = "now() - (%s::bigint - n) * interval '1 second'", "'{}'::jsonb"
    else:  # a recursive CTE counts, so the whole batch runs inside SQLite
        cte = "WITH RECURSIVE g(n) AS (SELECT %s UNION ALL SELECT n + 1 FROM g WHERE n < %s) "
        source = "g"
        created, metadata = "datetime('now', '-' || (%s - n) || ' seconds')", "'{}'"
    insert = (
        f"{cte}INSERT INTO {Message._meta.db_table} ({MESSAGE_COLUMNS})"
        f" SELECT %s, %s, n, {role}, {content},"
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
            db = "postgres" if pg else "sqlite"
            log(f"{db}: fill {label(size)}: {last:,} rows ({elapsed:.1f} s)")
    Session.objects.filter(pk=session.pk).update(last_seq=size)
    session.last_seq = size
    return time.perf_counter() - started
