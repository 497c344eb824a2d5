"""Throughput and memory of `collapse-sessions` on a legacy per-channel install.

Usage: ``python bench/collapse.py [--quick]`` (normally through ``bench/run.py``).

Sizes: 100k messages over 100 users and 1M over 1,000 users (--quick: 10k over 10 and
100k over 100), so every user has ~1,000 messages and only the number of users grows.
Each user has legacy telegram, whatsapp and web sessions; every 20th whatsapp message is a
copy of a telegram one (a duplicate to drop), and users with an even id also have a
canonical session with 100 messages of their own, which exercises renumbering around
existing rows.

Runs on SQLite (a temporary file) and on PostgreSQL when reachable at
``$BENCH_POSTGRES_URL`` (default ``postgres://postgres@127.0.0.1:5432/qorven_bench_collapse``;
dropped and recreated per size). Settings are read once per process and peak memory is a
process-wide high-water mark, so each size is filled in one subprocess, then each run
collapses a fresh copy of it (a file copy; ``CREATE DATABASE … TEMPLATE``) in its own
subprocess: with 1 job on SQLite (one writer at a time), with 1, 2 and 4 jobs on
PostgreSQL. Each run reports:

- messages/s: messages in the merged sessions / wall time of the whole collapse
  (digests, images, renumbering, archiving; one transaction per user);
- peak RSS growth during the collapse (ru_maxrss after minus before); flat memory means
  about the same figure for 10x the messages.

The result is checked: one chat per user, every row still there, the copies dropped.
Progress goes to stderr; the last stdout line is the JSON result of bench/run.py's protocol.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/qorven_bench_collapse"
SIZES = {False: ((100_000, 100), (1_000_000, 1_000)), True: ((10_000, 10), (100_000, 100))}
# Users collapsed at once: SQLite writes one transaction at a time, PostgreSQL does not.
JOBS = {"sqlite": (1,), "postgres": (1, 2, 4)}
SESSIONS_PER_FILL = 400  # about 120k rows per INSERT … SELECT
PADDING = " — and some more words so the row is about as long as a real chat message."
Row = dict[str, Any]


def log(message: str) -> None:
    print(f"[collapse] {message}", file=sys.stderr, flush=True)


def met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def label(size: int) -> str:
    return f"{size // 1_000_000}M" if size >= 1_000_000 else f"{size // 1_000}k"


# --- parent ------------------------------------------------------------------------------


def postgres_admin(url: str, *statements: str) -> str | None:
    """Run statements on the server's `postgres` database; the reason if unreachable.

    `{db}` in a statement is the bench database's name, `{run}` its per-run clone's.
    """
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    dbname = str(conninfo_to_dict(url).get("dbname") or "qorven_bench_collapse")
    admin = make_conninfo(url, dbname="postgres", connect_timeout=3)
    names = {"db": sql.Identifier(dbname), "run": sql.Identifier(f"{dbname}_run")}
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            for statement in statements:
                conn.execute(sql.SQL(statement).format(**names))
    except psycopg.OperationalError as exc:
        return str(exc).strip().splitlines()[0]
    return None


def run_url(url: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    dbname = str(conninfo_to_dict(url).get("dbname") or "qorven_bench_collapse")
    return url.rsplit("/", 1)[0] + f"/{dbname}_run"


def run_child(phase: str, database_url: str, size: int, users: int, jobs: int = 1) -> Row:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SECRET_KEY": "bench-not-a-secret",
        "DJANGO_DEBUG": "0",  # DEBUG would record every query
    }
    cmd = [sys.executable, __file__, "--phase", phase, "--size", str(size), "--users", str(users)]
    cmd += ["--jobs", str(jobs)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{phase} {label(size)} failed (exit {proc.returncode})")
    return dict(json.loads(lines[-1]))


def goal_notes(rows: list[Row], quick: bool) -> list[str]:
    """The goals beside the figures; reported, not asserted."""
    notes = []
    for db, jobs in dict.fromkeys((row["db"], row["jobs"]) for row in rows):
        mine = sorted(
            (r for r in rows if (r["db"], r["jobs"]) == (db, jobs)), key=lambda r: r["messages"]
        )
        small, big = mine[0], mine[-1]
        growth = big["messages"] / small["messages"]
        ratio = big["peak_mem_mb"] / max(small["peak_mem_mb"], 0.1)
        # A few MB of high-water mark is allocator and driver-buffer noise, not data held.
        flat = met(ratio <= 2 or big["peak_mem_mb"] <= 4)
        speed = big["msgs_per_s"]
        if db == "postgres":
            goal = f"goal >= 20k/s: {met(speed >= 20_000)}"
        else:
            goal = "the 20k/s goal is for PostgreSQL"
        notes += [
            f"{db} jobs={jobs}: {speed:,.0f} messages/s at {label(big['messages'])} ({goal})",
            f"{db} jobs={jobs}: peak RSS growth {small['peak_mem_mb']:.1f} MB at"
            f" {label(small['messages'])}, {big['peak_mem_mb']:.1f} MB at {label(big['messages'])}"
            f" ({growth:.0f}x the messages, {big['text_mb']:.0f} MB of text): ratio {ratio:.1f}"
            f" (goal flat: ratio <= 2 or within 4 MB: {flat})",
        ]
    if quick:
        notes.append("--quick: 10k and 100k messages; the goals are for the 1M run")
    return notes


def parent(quick: bool) -> int:
    rows: list[Row] = []
    notes: list[str] = []
    failed = False
    pg_url = os.environ.get("BENCH_POSTGRES_URL", DEFAULT_PG_URL)
    with tempfile.TemporaryDirectory(prefix="qorven-bench-") as tmp:
        for db in ("sqlite", "postgres"):
            for size, users in SIZES[quick]:
                # Fill once, then collapse a fresh copy per number of jobs.
                if db == "sqlite":
                    base, copy = Path(tmp) / "filled.sqlite3", Path(tmp) / "run.sqlite3"
                    url, target = f"sqlite:///{base}", f"sqlite:///{copy}"
                    for old in Path(tmp).glob("*.sqlite3*"):
                        old.unlink()
                else:
                    why_not = postgres_admin(
                        pg_url, "DROP DATABASE IF EXISTS {db} WITH (FORCE)", "CREATE DATABASE {db}"
                    )
                    if why_not is not None:
                        log(f"PostgreSQL skipped: {pg_url} is unreachable ({why_not})")
                        notes.append(f"postgres: skipped, {pg_url} unreachable")
                        break
                    url, target = pg_url, run_url(pg_url)
                try:
                    filled = run_child("fill", url, size, users)
                    for jobs in JOBS[db]:
                        if db == "sqlite":
                            shutil.copyfile(base, copy)
                        else:
                            postgres_admin(
                                pg_url,
                                "DROP DATABASE IF EXISTS {run} WITH (FORCE)",
                                "CREATE DATABASE {run} TEMPLATE {db}",
                            )
                        row = run_child("collapse", target, size, users, jobs)
                        rows.append({"db": db, **row, "fill_s": filled["fill_s"]})
                        log(f"{db} {label(size)} jobs={jobs}: {json.dumps(rows[-1])}")
                except (RuntimeError, ValueError, KeyError) as exc:
                    log(f"{db}: {exc}")
                    notes.append(f"{db}: FAILED ({exc})")
                    failed = True
        if any(row["db"] == "postgres" for row in rows):
            postgres_admin(pg_url, "DROP DATABASE IF EXISTS {run} WITH (FORCE)")
    notes = (goal_notes(rows, quick) if rows else []) + notes
    for note in notes:
        log(note)
    print(json.dumps({"bench": "collapse", "rows": rows, "notes": notes}))
    return 1 if failed else 0


# --- children ----------------------------------------------------------------------------


def setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qorven.settings")
    import django

    django.setup()


def fill(size: int, users: int) -> Row:
    """Users, sessions and ~`size` messages, bulk-inserted server-side."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection, transaction

    from sessions_app.models import Message, Session
    from tenancy.services import tenant_bootstrap

    pg = connection.vendor == "postgresql"
    call_command("migrate", verbosity=0)
    boot = tenant_bootstrap(tenant_slug="bench", qor_slug="bench", owner_username="bench-owner")
    started = time.perf_counter()
    made = get_user_model().objects.bulk_create(
        get_user_model()(username=f"bench-{i}", password="!") for i in range(users)
    )
    per_user = size // users
    sessions = []
    for user in made:
        for channel in ("telegram", "whatsapp", "web"):
            sessions.append(
                Session(
                    tenant=boot.tenant,
                    qor=boot.qor,
                    user=user,
                    kind=Session.Kind.LEGACY,
                    channel=channel,
                    external_thread_id=f"{channel}-{user.pk}",
                )
            )
        if user.pk % 2 == 0:
            sessions.append(
                Session(tenant=boot.tenant, qor=boot.qor, user=user, kind=Session.Kind.CANONICAL)
            )
    Session.objects.bulk_create(sessions, batch_size=1_000)
    # Even users: canonical 100 + 3 legacy sessions sharing the rest; odd users: 3 legacy.
    count = (
        f"CASE WHEN s.kind = 'canonical' THEN 100 WHEN s.user_id %% 2 = 0"
        f" THEN {(per_user - 100) // 3} ELSE {per_user // 3} END"
    )
    slot = (
        "CASE s.channel WHEN 'telegram' THEN 0 WHEN 'whatsapp' THEN 1 WHEN 'web' THEN 2 ELSE 3 END"
    )
    # Every 20th whatsapp message is the telegram one of the same number: a duplicate.
    same_as = f"CASE WHEN s.channel = 'whatsapp' AND g.n %% 20 = 0 THEN 0 ELSE {slot} END"
    if pg:
        series = f"generate_series(1, {per_user}) AS g(n)"
        created = (
            f"timestamptz '2024-01-01 00:00:00+00' + (g.n * 4 + {same_as}) * interval '1 second'"
        )
        cte, metadata = "", "'{}'::jsonb"
    else:
        cte = (
            f"WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {per_user}) "
        )
        series = "g"
        created = f"datetime('2024-01-01 00:00:00', '+' || (g.n * 4 + {same_as}) || ' seconds')"
        metadata = "'{}'"
    insert = (
        f"{cte}INSERT INTO {Message._meta.db_table} (tenant_id, session_id, seq, role, content,"
        " channel, sender_name, created_at, external_scope, external_id, tool_calls,"
        " tool_call_id, metadata)"
        " SELECT s.tenant_id, s.id, g.n, CASE WHEN g.n %% 2 = 1 THEN 'user' ELSE 'assistant' END,"
        f" 'bench message ' || s.user_id || '-' || g.n || '-' || ({same_as}) || %s,"
        " CASE WHEN s.channel = '' THEN 'tui' ELSE s.channel END, '',"
        f" {created}, '', '', NULL, '', {metadata}"
        f" FROM {Session._meta.db_table} s CROSS JOIN {series}"
        f" WHERE s.id BETWEEN %s AND %s AND g.n <= ({count})"
    )
    ids = sorted(Session.objects.exclude(user__username="bench-owner").values_list("id", flat=True))
    for first in range(0, len(ids), SESSIONS_PER_FILL):
        chunk = ids[first : first + SESSIONS_PER_FILL]
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(insert, [PADDING, chunk[0], chunk[-1]])
        log(f"fill {label(size)}: {first + len(chunk):,}/{len(ids):,} sessions")
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Session._meta.db_table} SET last_seq = (SELECT COUNT(*)"
            f" FROM {Message._meta.db_table} m WHERE m.session_id = {Session._meta.db_table}.id)"
        )
        if pg:
            cursor.execute("VACUUM ANALYZE")
            cursor.execute("CHECKPOINT")
        else:
            cursor.execute("ANALYZE")
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return {"fill_s": round(time.perf_counter() - started, 2)}


def collapse(size: int, users: int, jobs: int) -> Row:
    """Collapse everything, measuring time and peak RSS growth; check the result."""
    from django.db import connection
    from django.db.models import Sum
    from django.db.models.functions import Length, Mod

    from legacy_app.collapse import CollapseTotals, collapse_sessions
    from sessions_app.models import Message, Session

    name = "postgres" if connection.vendor == "postgresql" else connection.vendor
    total = Message.objects.count()
    text = Message.objects.aggregate(n=Sum(Length("content")))["n"] or 0
    copies = Message.objects.annotate(nth=Mod("seq", 20)).filter(channel="whatsapp", nth=0)
    expected_kept = total - copies.count()
    # Warm up the connection and the ORM's caches before taking the baseline.
    Session.objects.filter(kind="canonical").exists()
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    totals = CollapseTotals()
    started = time.perf_counter()
    for done, outcome in enumerate(collapse_sessions(jobs=jobs), start=1):
        totals.add(outcome)
        if done % max(users // 10, 1) == 0:
            rate = totals.messages / (time.perf_counter() - started)
            log(
                f"{name} {label(size)} jobs={jobs}: {done:,}/{users:,} users,"
                f" {rate:,.0f} messages/s"
            )
    seconds = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline
    canonical = Session.objects.filter(kind="canonical", state="active")
    merged = Message.objects.filter(session__in=canonical).count()
    checks = {
        "every user collapsed": (totals.users, totals.failed) == (users, 0),
        "one chat per user": canonical.count() == users,
        "no row lost": totals.messages == total and Message.objects.count() == total,
        "duplicates dropped": merged == expected_kept == total - totals.duplicates,
        "digests written": totals.digests == 3 * users,
    }
    broken = [what for what, ok in checks.items() if not ok]
    if broken:
        raise AssertionError(f"collapse result wrong: {', '.join(broken)}")
    return {
        "db": name,
        "messages": total,
        "users": users,
        "jobs": jobs,
        "duplicates": totals.duplicates,
        "collapse_s": round(seconds, 2),
        "msgs_per_s": round(total / seconds),
        "peak_mem_mb": round(peak_kb / 1024, 1),
        "text_mb": round(text / 2**20, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="10k and 100k messages instead of 100k and 1M"
    )
    parser.add_argument("--phase", choices=["fill", "collapse"], help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--users", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.phase:
        return parent(args.quick)
    setup()
    row = (
        fill(args.size, args.users)
        if args.phase == "fill"
        else collapse(args.size, args.users, args.jobs)
    )
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
