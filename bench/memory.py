"""memory_search latency as the memory table grows, against an unindexed icontains scan.

Usage: ``python bench/memory.py [--quick]`` (normally through ``bench/run.py``).

Runs on SQLite (always, in a fresh temporary file) and on PostgreSQL when reachable at
``$BENCH_POSTGRES_URL`` (default ``postgres://postgres@127.0.0.1:5432/qorven_bench_memory``;
that database is dropped and recreated at the start of each run). Each database runs in its
own subprocess (``--db sqlite|postgres``) and this parent merges their rows.

Per database, one table per size (10k and 1M memories; --quick: 10k and 100k), filled
server-side in batches: 10% of the memories belong to one heavy user, the rest to users of
1,000 memories each, spread over two tenants. Each memory is ten words drawn from a
4,096-word vocabulary with a skewed (cubic) distribution, so a few words are in a large
share of the memories and most are rare, as in real notes. Queries are short questions of
two to four such words plus stop words ("what about … and …?"); each is asked for a typical
user (a different one each time) and, where it holds more than a typical user, for the
heavy user. Timed over READS queries after WARMUP:

- ``search``: ``memory_app.selectors.memory_search`` (full-text: PostgreSQL tsvector + GIN,
  SQLite FTS5), limit 5;
- ``scan``: the baseline, what memory_search did before full-text search: the owner's
  memories containing any query word (``icontains``, no text index), newest 200, ranked in
  Python by words matched.

Goal (reported, not asserted): at 1M memories, search p50 under 20 ms on PostgreSQL.

Progress goes to stderr; the last stdout line is the JSON result of bench/run.py's protocol.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from _common import Row, django_setup, label, log, met, percentiles, run_databases, settle

DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/qorven_bench_memory"
SIZES, QUICK_SIZES = (10_000, 1_000_000), (10_000, 100_000)
PER_USER, HEAVY_SHARE = 1_000, 0.1
VOCAB, WORDS_PER_MEMORY = 4_096, 10
READS, WARMUP, SCAN_READS = 200, 20, 100
CHUNK = 100_000
GOAL_MS = 20.0
STOPWORDS = ["what", "about", "and", "the", "my", "is", "did", "i", "say", "with"]


def vocabulary() -> list[str]:
    """VOCAB distinct pseudo-words (consonant-vowel syllables), none an English stop word."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    syllables = [c + v for c in consonants for v in vowels]
    pool = ["".join(parts) for parts in itertools.product(syllables, repeat=3)]
    random.Random(7).shuffle(pool)
    return pool[:VOCAB]


def skewed(rng: random.Random) -> int:
    """A vocabulary index (1-based), skewed like the fill: low indexes are common words."""
    return 1 + int(VOCAB * rng.random() ** 3)


def queries(words: list[str], count: int) -> list[str]:
    rng = random.Random(11)
    out = []
    for _ in range(count):
        picked = [words[skewed(rng) - 1] for _ in range(rng.randint(2, 4))]
        out.append(f"{rng.choice(STOPWORDS)} {rng.choice(STOPWORDS)} {' and '.join(picked)}?")
    return out


# --- parent: one subprocess per database -------------------------------------------------


def goal_notes(rows: list[Row], quick: bool) -> list[str]:
    notes = []
    for row in rows:
        if row["memories"] != max(r["memories"] for r in rows):
            continue
        at = label(row["memories"])
        owner = row["mode"]
        goal = (f"goal < {GOAL_MS:.0f} ms: {met(row['search_p50_ms'] < GOAL_MS)}" if row["db"] == "postgres"
                else "the goal is for PostgreSQL")
        notes.append(
            f"{row['db']}: {at} memories, {owner}: search p50 {row['search_p50_ms']:.2f} ms,"
            f" p99 {row['search_p99_ms']:.2f} ms; scan p50 {row['scan_p50_ms']:.2f} ms ({goal})"
        )
    if quick:
        notes.append("--quick: the largest size is 100k, not 1M; the goal is for the full run")
    return notes


def parent(quick: bool) -> int:
    pg_url = os.environ.get("BENCH_POSTGRES_URL", DEFAULT_PG_URL)
    rows, notes, failed = run_databases(__file__, pg_url, quick)
    notes = (goal_notes(rows, quick) if rows else []) + notes
    for note in notes:
        log(note)
    print(json.dumps({"bench": "memory", "rows": rows, "notes": notes}))
    return 1 if failed else 0


# --- child: one database, Django configured for it ----------------------------------------


def word_index_sql(pg: bool) -> str:
    """SQL for the vocabulary index of word k of memory n: a hash of (n, k) in [0, 1),
    cubed for the skew. Integer arithmetic that fits 64 bits on both databases."""
    if pg:
        x = "((n * 1103515245 + k * 2654435761) %% 2147483647)::float8 / 2147483647"
        return f"1 + floor({VOCAB} * power({x}, 3))::int"
    x = "((n * 1103515245 + k * 2654435761) %% 2147483647) / 2147483647.0"
    return f"1 + CAST({VOCAB} * ({x}) * ({x}) * ({x}) AS INTEGER)"


def fill(size: int, tenants: list[Any], qors: list[Any], heavy: Any, first_user_id: int, pg: bool) -> float:
    """Insert `size` memories server-side; return seconds."""
    from django.db import connection, transaction

    from memory_app.fulltext import FTS_TABLE
    from memory_app.models import Memory

    heavy_count = int(size * HEAVY_SHARE)
    table = Memory._meta.db_table
    # Row n: the heavy user's for n <= heavy_count; after that, blocks of PER_USER rows per
    # user, users alternating between the two tenants.
    block = f"((n - {heavy_count} - 1) / {PER_USER})"
    user = f"CASE WHEN n <= {heavy_count} THEN {heavy.pk} ELSE {first_user_id} + {block} END"
    first = f"n <= {heavy_count} OR {block} %% 2 = 0"
    tenant = f"CASE WHEN {first} THEN {tenants[0].pk} ELSE {tenants[1].pk} END"
    qor = f"CASE WHEN {first} THEN {qors[0].pk} ELSE {qors[1].pk} END"
    kind = ("CASE n %% 5 WHEN 0 THEN 'fact' WHEN 1 THEN 'reminder' WHEN 2 THEN 'lesson' WHEN 3 THEN 'summary'"
            " ELSE 'conversation_digest' END")
    if pg:
        content = (f"(SELECT string_agg(v.word, ' ') FROM generate_series(1, {WORDS_PER_MEMORY}) AS kk(k)"
                   f" JOIN bench_vocab v ON v.i = {word_index_sql(pg)})")
        source, cte = "generate_series(%s::bigint, %s::bigint) AS g(n)", ""
        created = "now() - n * interval '1 second'"
    else:
        content = (f"(SELECT group_concat(v.word, ' ') FROM bench_k JOIN bench_vocab v"
                   f" ON v.i = {word_index_sql(pg)})")
        cte = "WITH RECURSIVE g(n) AS (SELECT %s UNION ALL SELECT n + 1 FROM g WHERE n < %s) "
        source = "g"
        created = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-' || n || ' seconds')"
    insert = (
        f"{cte}INSERT INTO {table} (created_at, updated_at, tenant_id, qor_id, user_id, type, content,"
        " content_hash, channels, period_start, period_end, source_session_id)"
        f" SELECT {created}, {created}, {tenant}, {qor}, {user}, {kind}, {content}, 'bench-' || n, '[]',"
        f" NULL, NULL, NULL FROM {source}"
    )
    started = time.perf_counter()
    for first in range(1, size + 1, CHUNK):
        last = min(first + CHUNK - 1, size)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}")
            before = cursor.fetchone()[0]
            cursor.execute(insert, [first, last])
            if not pg:  # the FTS5 entries the memory services write, written in bulk here
                cursor.execute(
                    f"INSERT INTO {FTS_TABLE} (rowid, owner, content) SELECT id, 't' || tenant_id || 'q' ||"
                    f" qor_id || 'u' || COALESCE(user_id, 'x'), COALESCE(search_text, content) FROM {table} WHERE id > %s",
                    [before],
                )
        if size > CHUNK:
            log(f"{'postgres' if pg else 'sqlite'}: fill {label(size)}: {last:,} memories"
                f" ({time.perf_counter() - started:.1f} s)")
    return time.perf_counter() - started


def scan_search(*, tenant: Any, qor: Any, user: Any, query: str, limit: int = 5) -> list[Any]:
    """The baseline: memory_search before full-text search (scoped icontains, no text index)."""
    from functools import reduce
    from operator import or_

    from django.db.models import Q

    from memory_app.models import Memory

    words = sorted({w.casefold() for w in re.findall(r"\w{3,}", query)})[:12]
    if not words:
        return []
    match = reduce(or_, (Q(content__icontains=w) for w in words))
    candidates = list(Memory.objects.filter(tenant=tenant, qor=qor, user=user).filter(match)
                      .order_by("-created_at")[:200])
    scored = [(sum(w in m.content.casefold() for w in words), m) for m in candidates]
    scored.sort(key=lambda pair: pair[0], reverse=True)
    return [m for _, m in scored[:limit]]


def timings(call: Callable[[int], list[Any]], reads: int) -> tuple[list[float], int]:
    """Milliseconds per call over `reads` calls after WARMUP; and how many found something."""
    for i in range(WARMUP):
        call(i)
    result, hits = [], 0
    for i in range(reads):
        started = time.perf_counter_ns()
        found = call(WARMUP + i)
        result.append((time.perf_counter_ns() - started) / 1e6)
        hits += bool(found)
    return result, hits


def measure(owner: Callable[[int], tuple[Any, Any, Any]], asked: list[str]) -> Row:
    from memory_app.selectors import memory_search

    def ours(i: int) -> list[Any]:
        tenant, qor, user = owner(i)
        found = memory_search(tenant=tenant, qor=qor, user=user, query=asked[i % len(asked)], limit=5)
        if any(m.user_id != user.pk or m.tenant_id != tenant.pk for m in found):
            raise AssertionError("memory_search crossed owners")
        return found

    def scan(i: int) -> list[Any]:
        tenant, qor, user = owner(i)
        return scan_search(tenant=tenant, qor=qor, user=user, query=asked[i % len(asked)])

    ms, hits = timings(ours, READS)
    scan_ms, _ = timings(scan, SCAN_READS)
    p50, p99 = percentiles(ms)
    scan_p50, scan_p99 = percentiles(scan_ms)
    return {"search_p50_ms": p50, "search_p99_ms": p99, "scan_p50_ms": scan_p50, "scan_p99_ms": scan_p99,
            "speedup_p50": round(scan_p50 / p50, 1) if p50 else None, "found_pct": round(100 * hits / READS)}


def child(quick: bool) -> int:
    django_setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from memory_app.models import Memory
    from tenancy.services import tenant_bootstrap

    pg = connection.vendor == "postgresql"
    name = "postgres" if pg else connection.vendor
    call_command("migrate", verbosity=0)
    words = vocabulary()
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE bench_vocab (i INTEGER PRIMARY KEY, word TEXT NOT NULL)")
        cursor.executemany("INSERT INTO bench_vocab (i, word) VALUES (%s, %s)", list(enumerate(words, start=1)))
        if not pg:
            cursor.execute("CREATE TABLE bench_k (k INTEGER PRIMARY KEY)")
            cursor.executemany("INSERT INTO bench_k (k) VALUES (%s)", [(k,) for k in range(1, WORDS_PER_MEMORY + 1)])
    asked = queries(words, READS + WARMUP)
    rows: list[Row] = []
    User = get_user_model()
    for size in QUICK_SIZES if quick else SIZES:
        with connection.cursor() as cursor:  # each size gets the table to itself
            cursor.execute(f"DELETE FROM {Memory._meta.db_table}")
            if not pg:
                cursor.execute("DELETE FROM memory_app_memory_fts")
        boots = [tenant_bootstrap(tenant_slug=f"bench-{t}", qor_slug="aria", owner_username=f"owner-{t}")
                 for t in ("a", "b")]
        tenants, qors = [b.tenant for b in boots], [b.qor for b in boots]
        heavy = User.objects.get_or_create(username=f"heavy-{size}")[0]
        typical_count = (size - int(size * HEAVY_SHARE) + PER_USER - 1) // PER_USER
        users = User.objects.bulk_create([User(username=f"u{size}-{i}") for i in range(typical_count)])
        if not all(u.pk for u in users) or users[-1].pk - users[0].pk != len(users) - 1:
            users = list(User.objects.filter(username__startswith=f"u{size}-").order_by("pk"))
        first_id = users[0].pk
        log(f"{name}: filling {label(size)} memories")
        fill_s = fill(size, tenants, qors, heavy, first_id, pg)
        settle(pg)
        log(f"{name}: filled {label(size)} in {fill_s:.1f} s; measuring")
        rng = random.Random(size)
        picks = [rng.randrange(len(users)) for _ in range(READS + WARMUP)]

        def typical(i: int) -> tuple[Any, Any, Any]:
            index = picks[i % len(picks)]
            return tenants[index % 2], qors[index % 2], users[index]

        def heavy_owner(i: int) -> tuple[Any, Any, Any]:
            return tenants[0], qors[0], heavy

        owners = [(typical, PER_USER), (heavy_owner, int(size * HEAVY_SHARE))]
        for owner, owned in owners if owners[1][1] > PER_USER else owners[:1]:  # at 10k the heavy one is typical
            # "mode" is a case field for bench/run.py's table: whose memories are searched.
            row = {"db": name, "memories": size, "mode": f"an owner of {label(owned)}", **measure(owner, asked),
                   "fill_s": round(fill_s, 1)}
            rows.append(row)
            log(f"{name}: {json.dumps(row)}")
    print(json.dumps({"bench": "memory", "rows": rows}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes 10k and 100k")
    parser.add_argument("--db", choices=["sqlite", "postgres"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    return child(args.quick) if args.db else parent(args.quick)


if __name__ == "__main__":
    sys.exit(main())
