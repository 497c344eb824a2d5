"""How long the data migrations over the messages table take on a large install.

Usage: ``python bench/migrations.py [--quick]`` (minutes at full size; not in ``make bench``).

Measures ``sessions_app 0021`` (the tool rounds of failed messages marked): the database is
migrated to ``sessions_app 0020``, filled with 1,000,000 messages, then ``migrate
sessions_app 0021`` is timed in a process of its own, as ``qorven migrate`` runs it. Twice:
over 10,000 sessions of 100 messages, over 100 sessions of 10,000 and over 10 of 100,000
(a person's one conversation keeps growing); --quick: a tenth of the sessions, 100,000
messages; --sessions N: that shape alone. A
session holds turns of four rows: the person's message, the Qor's tool call, the tool's
result and the Qor's answer, the last three naming the message they answer
(``reply_to``). One turn in 50 failed: its message is ``failed`` and its last row is the
notice the person read instead of an answer: 2% of the person's messages failed (5,000
of 1,000,000 rows), and 10,000 rows are rounds to mark.

Runs on SQLite (a temporary file) and on PostgreSQL at ``$BENCH_POSTGRES_URL`` (default
``postgres://postgres@127.0.0.1:5432/qorven_bench_migrations``; dropped and recreated).
Each database reports the wall time of the migration, its rate per million messages, the
peak RSS of the migrating process, and whether the rows it marked are exactly
the failed turns' rounds. Progress goes to stderr; the last stdout line is JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from _common import log, run_databases

# (sessions, turns of 4 rows each): 1,000,000 messages as many short chats, then as fewer,
# longer ones (a person's one conversation keeps growing); --quick: a tenth of the sessions.
SHAPES = [(10_000, 25), (100, 2_500), (10, 25_000)]
SHAPE = "BENCH_MIGRATIONS_SHAPE"
SESSIONS_PER_FILL = 500
# A turn's rows are seq 4k+1 … 4k+4 of its session; t is the row's place in its turn.
PLACE = "((g.n - 1) %% 4)"
ASKED = f"(g.n - {PLACE})"
FAILED = "(((s.id * 7 + (g.n - 1) / 4) * 37) %% 50 = 7)"  # one turn in 50, spread evenly


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 messages instead of 1,000,000")
    parser.add_argument("--sessions", type=int, action="append", choices=[n for n, _ in SHAPES],
                        help="only the shape of this many sessions (a tenth of them with --quick; repeatable)")
    parser.add_argument("--db", choices=["sqlite", "postgres"], help=argparse.SUPPRESS)
    parser.add_argument("--migrate", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.migrate:
        return migrate()
    if args.db:
        sessions, turns = (int(n) for n in os.environ[SHAPE].split("x"))
        return child(sessions, turns)
    pg_url = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/qorven_bench_migrations")
    rows, notes, failed = [], [], False
    for sessions, turns in [shape for shape in SHAPES if not args.sessions or shape[0] in args.sessions]:
        os.environ[SHAPE] = f"{sessions // 10 if args.quick else sessions}x{turns}"
        shape_rows, shape_notes, shape_failed = run_databases(__file__, pg_url, args.quick)
        rows, notes, failed = rows + shape_rows, notes + shape_notes, failed or shape_failed
    for row in rows:
        log(f"{row['db']}: {row['migration']} over {row['messages']:,} messages in {row['sessions']:,} sessions:"
            f" {row['seconds']} s ({row['s_per_M']} s per million), peak RSS {row['rss_mb']} MB,"
            f" result {row['result']}")
    print(json.dumps({"bench": "migrations", "rows": rows, "notes": notes}))
    return 1 if failed or any(row["result"] != "exact" for row in rows) else 0


def child(sessions: int, turns: int) -> int:
    """Fill the database at sessions_app 0020, then migrate it in a process of its own."""
    from _common import django_setup

    django_setup()
    from django.core.management import call_command
    from django.db import connection

    db = "postgres" if connection.vendor == "postgresql" else "sqlite"
    call_command("migrate", verbosity=0)
    call_command("migrate", "sessions_app", "0020", verbosity=0)
    messages, fill_s = fill(sessions, turns, pg=db == "postgres")
    log(f"{db}: filled {messages:,} messages over {sessions:,} sessions in {fill_s:.0f} s")
    connection.close()
    done = subprocess.run([sys.executable, __file__, "--migrate"], check=True, stdout=subprocess.PIPE, text=True)
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    row = {"db": db, "migration": "sessions_app 0021", "messages": messages, "sessions": sessions, **measured,
           "s_per_M": round(measured["seconds"] * 1_000_000 / messages, 1), "result": check()}
    print(json.dumps({"rows": [row], "notes": []}))
    return 0


def migrate() -> int:
    """`migrate sessions_app 0021` as `qorven migrate` runs it: its time, the process's peak RSS."""
    from _common import django_setup

    django_setup()
    from django.core.management import call_command

    started = time.perf_counter()
    call_command("migrate", "sessions_app", "0021", verbosity=0)
    seconds = time.perf_counter() - started
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": round(seconds, 1), "rss_mb": round(rss_mb)}))
    return 0


def fill(sessions: int, turns: int, *, pg: bool) -> tuple[int, float]:
    """`sessions` group sessions of `turns` turns each, bulk-inserted server-side."""
    from django.db import connection, transaction

    from sessions_app.models import Message, Session
    from tenancy.services import tenant_bootstrap

    boot = tenant_bootstrap(tenant_slug="bench", qor_slug="bench", owner_username="bench-owner")
    started = time.perf_counter()
    Session.objects.bulk_create(
        (Session(tenant=boot.tenant, qor=boot.qor, kind=Session.Kind.GROUP, channel="telegram",
                 external_thread_id=f"group-{i}", last_seq=turns * 4) for i in range(sessions)),
        batch_size=1_000)
    json_type = "::jsonb" if pg else ""
    reply_to = f"'{{\"reply_to\": ' || {ASKED} || '}}'"
    notice = f"'{{\"notice\": \"unreachable\", \"reply_to\": ' || {ASKED} || '}}'"
    call = "'[{\"id\": \"call_' || g.n || '\", \"type\": \"function\", \"function\": {\"name\": \"current_time\", \"arguments\": \"{}\"}}]'"
    if pg:
        cte, series = "", f"generate_series(1, {turns * 4}) AS g(n)"
        created = "now() - (s.id * 100000 + 100000 - g.n) * interval '1 second'"
    else:
        cte = f"WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {turns * 4}) "
        series, created = "g", "datetime('now', '-' || (s.id * 100000 + 100000 - g.n) || ' seconds')"
    insert = (
        f"{cte}INSERT INTO {Message._meta.db_table} (tenant_id, session_id, seq, role, content, channel,"
        " sender_name, created_at, external_scope, external_id, tool_calls, tool_call_id, metadata, answer_state)"
        f" SELECT s.tenant_id, s.id, g.n,"
        f" CASE {PLACE} WHEN 0 THEN 'user' WHEN 1 THEN 'assistant' WHEN 2 THEN 'tool'"
        f"  WHEN 3 THEN CASE WHEN {FAILED} THEN 'system' ELSE 'assistant' END END,"
        f" CASE {PLACE} WHEN 2 THEN '{{\"time\": \"12:00\"}}' ELSE 'bench message ' || g.n END,"
        f" 'telegram', '', {created}, '', '',"
        f" CASE {PLACE} WHEN 1 THEN ({call}){json_type} END,"
        f" CASE {PLACE} WHEN 2 THEN 'call_' || (g.n - 1) ELSE '' END,"
        f" (CASE {PLACE} WHEN 0 THEN '{{}}' WHEN 3 THEN CASE WHEN {FAILED} THEN {notice} ELSE {reply_to} END"
        f"  ELSE {reply_to} END){json_type},"
        f" CASE {PLACE} WHEN 0 THEN CASE WHEN {FAILED} THEN 'failed' ELSE 'answered' END END"
        f" FROM {Session._meta.db_table} s CROSS JOIN {series} WHERE s.id BETWEEN %s AND %s"
    )
    ids = sorted(Session.objects.filter(tenant=boot.tenant).values_list("id", flat=True))
    with connection.cursor() as cursor:
        trigger = None
        if not pg:  # what search indexes is not what is measured: the fill skips it on SQLite
            cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'message_search_insert'")
            (trigger,) = cursor.fetchone()
            cursor.execute("DROP TRIGGER message_search_insert")
        for first in range(0, len(ids), SESSIONS_PER_FILL):
            chunk = ids[first:first + SESSIONS_PER_FILL]
            with transaction.atomic():
                cursor.execute(insert, [chunk[0], chunk[-1]])
            log(f"fill: {first + len(chunk):,}/{len(ids):,} sessions")
    with connection.cursor() as cursor:
        if trigger:
            cursor.execute(trigger)
        cursor.execute("VACUUM ANALYZE" if pg else "ANALYZE")
        cursor.execute("CHECKPOINT" if pg else "PRAGMA wal_checkpoint(TRUNCATE)")
    return Message.objects.count(), time.perf_counter() - started


def check() -> str:
    """'exact' when the rows marked are the failed turns' tool call and result, each once."""
    from sessions_app.models import Message

    failed = Message.objects.filter(answer_state="failed").count()
    marked = Message.objects.filter(metadata__has_key="failed_round")
    rounds = marked.filter(role__in=["assistant", "tool"], metadata__has_key="reply_to").count()
    if failed and marked.count() == rounds == 2 * failed:
        return "exact"
    return f"WRONG ({marked.count()} marked, {failed} failed)"


if __name__ == "__main__":
    sys.exit(main())
