"""History search (the chat page's search box) over one person's long history, in English
and in languages written without spaces; and what the migration that indexes those
letters one by one costs a table of that size.

Usage: ``python bench/history_search.py [--quick]`` (normally through ``bench/run.py``).

Runs on SQLite (always, in a fresh temporary file) and on PostgreSQL when reachable at
``$BENCH_POSTGRES_URL`` (default ``postgres://postgres@127.0.0.1:5432/qorven_bench_history``;
that database is dropped and recreated at the start of each run). Each database runs in
its own subprocess (``--db sqlite|postgres``) and this parent merges their rows.

Per database and size (100k and 1M messages; --quick: 100k), one person's canonical
session is filled server-side, the user and assistant taking turns, from 4,096 sentences:
70% English (eight words from a 4,096-word vocabulary, skewed so a few words are in a
large share of the messages), 10% each Chinese, Japanese and Thai (words from a small
list of each, written without spaces), plus Korean in one sentence of twenty (a word and
its particle). Another person's session of the same size shares the table. Then, per
kind of query (one English word; two English words; a Chinese, Japanese, Thai or Korean
word), ``sessions_app.search.message_search`` (newest 50) is timed over READS queries
after WARMUP: p50/p99, and the share of queries that found something.

Last, where sessions_app has migration 0010 (history search by the letters of Chinese,
Japanese and Thai), it is unapplied and applied again over the filled table: the time the
host's migrate takes there (PostgreSQL builds an index concurrently; SQLite writes the
search entries of the messages holding such letters again).

Progress goes to stderr; the last stdout line is the JSON result of bench/run.py's protocol.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import time
from typing import Any

from _common import Row, django_setup, fill, label, log, percentiles, run_databases, settle

DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/qorven_bench_history"
SIZES, QUICK_SIZES = (100_000, 1_000_000), (100_000,)
SENTENCES, VOCAB = 4_096, 4_096
READS, WARMUP = 200, 20
MIGRATION = ("sessions_app", "0010_message_search_text")
BEFORE = ("sessions_app", "0009_thread_sessions_per_person")

CHINESE = ["寿司", "拉面", "医院", "明天", "昨天", "朋友", "电影", "工作", "周末", "咖啡", "火车", "北京", "上海",
           "生日", "礼物", "会议", "老师", "学校", "天气", "机场"]
JAPANESE = ["寿司", "東京", "タワー", "ラーメン", "ありがとう", "会議", "電車", "週末", "映画", "友達", "コーヒー",
            "誕生日", "天気", "病院", "大阪", "仕事", "プレゼント", "空港", "先生", "学校"]
THAI = ["ซูชิ", "แมว", "ฉัน", "กรุงเทพ", "ร้านอาหาร", "เพื่อน", "ทำงาน", "วันเสาร์", "กาแฟ", "รถไฟ", "หนัง",
        "โรงพยาบาล", "พรุ่งนี้", "เมื่อวาน", "ของขวัญ", "ประชุม", "ครู", "โรงเรียน", "อากาศ", "สนามบิน"]
KOREAN = ["스시", "라멘", "병원", "친구", "영화", "회의", "커피", "기차", "서울", "선물"]
PARTICLES = ["를", "을", "는", "은", "가", "이", "에서", "와"]


def vocabulary() -> list[str]:
    """VOCAB distinct pseudo-words (consonant-vowel syllables), none an English stop word."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    syllables = [c + v for c in consonants for v in vowels]
    pool = ["".join(parts) for parts in itertools.product(syllables, repeat=3)]
    random.Random(7).shuffle(pool)
    return pool[:VOCAB]


def skewed(rng: random.Random, size: int) -> int:
    return int(size * rng.random() ** 3)


def sentences(words: list[str]) -> list[str]:
    rng = random.Random(5)
    out = []
    for i in range(SENTENCES):
        kind = rng.random()
        if kind < 0.7:
            text = " ".join(words[skewed(rng, VOCAB)] for _ in range(8))
        elif kind < 0.8:
            text = "".join(rng.choice(CHINESE) for _ in range(5)) + "。"
        elif kind < 0.9:
            text = "".join(rng.choice(JAPANESE) + rng.choice(["が", "を", "に", "は", "と"]) for _ in range(4)) + "。"
        else:
            text = "".join(rng.choice(THAI) for _ in range(5))
        if i % 20 == 0:
            text += f" {rng.choice(KOREAN)}{rng.choice(PARTICLES)} 좋아요"
        out.append(text)
    return out


def queries(words: list[str]) -> dict[str, list[str]]:
    rng = random.Random(11)
    count = READS + WARMUP
    return {
        "english word": [words[skewed(rng, VOCAB)] for _ in range(count)],
        "two english words": [f"{words[skewed(rng, 64)]} {words[skewed(rng, 64)]}" for _ in range(count)],
        "chinese word": [rng.choice(CHINESE) for _ in range(count)],
        "japanese word": [rng.choice(JAPANESE) for _ in range(count)],
        "thai word": [rng.choice(THAI) for _ in range(count)],
        "korean word": [rng.choice(KOREAN) for _ in range(count)],
    }


# --- parent: one subprocess per database -------------------------------------------------


def parent(quick: bool) -> int:
    pg_url = os.environ.get("BENCH_POSTGRES_URL", DEFAULT_PG_URL)
    rows, notes, failed = run_databases(__file__, pg_url, quick)
    for row in rows:
        if row.get("mode") == "migration 0010":
            notes.append(f"{row['db']}: migration 0010 over {label(row['messages'])} messages:"
                         f" {row['migrate_s']} s (unapplied in {row['unapply_s']} s)")
    if quick:
        notes.append("--quick: 100k messages only")
    for note in notes:
        log(note)
    print(json.dumps({"bench": "history_search", "rows": rows, "notes": notes}))
    return 1 if failed else 0


# --- child: one database, Django configured for it ----------------------------------------


def measure(owner: Any, asked: list[str]) -> Row:
    from sessions_app.search import message_search

    tenant, qor, user = owner

    def ask(i: int) -> list[Any]:
        return message_search(tenant=tenant, qor=qor, user=user, query=asked[i])

    for i in range(WARMUP):
        ask(i)
    ms: list[float] = []
    hits = 0
    for i in range(WARMUP, WARMUP + READS):
        started = time.perf_counter_ns()
        found = ask(i)
        ms.append((time.perf_counter_ns() - started) / 1e6)
        hits += bool(found)
    p50, p99 = percentiles(ms)
    return {"search_p50_ms": p50, "search_p99_ms": p99, "found_pct": round(100 * hits / READS)}


def migration_times(name: str) -> Row | None:
    """Seconds to unapply migration 0010 and to apply it again, or None without it."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    if MIGRATION not in executor.loader.graph.nodes:
        log(f"{name}: no migration {MIGRATION[1]} here: nothing to time")
        return None
    started = time.perf_counter()
    executor.migrate([BEFORE])
    unapply_s = time.perf_counter() - started
    executor = MigrationExecutor(connection)
    started = time.perf_counter()
    executor.migrate([MIGRATION])
    return {"unapply_s": round(unapply_s, 1), "migrate_s": round(time.perf_counter() - started, 1)}


def child(quick: bool) -> int:
    django_setup()
    from django.core.management import call_command
    from django.db import connection

    from sessions_app.models import Message, Session
    from sessions_app.services.resolve import session_resolve
    from tenancy.services import tenant_bootstrap

    pg = connection.vendor == "postgresql"
    name = "postgres" if pg else connection.vendor
    call_command("migrate", verbosity=0)
    words = vocabulary()
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE bench_text (i INTEGER PRIMARY KEY, text TEXT NOT NULL)")
        cursor.executemany("INSERT INTO bench_text (i, text) VALUES (%s, %s)",
                           list(enumerate(sentences(words))))
    asked = queries(words)
    content = f"(SELECT text FROM bench_text WHERE i = (n * 2654435761) %% {SENTENCES})"
    rows: list[Row] = []
    for size in QUICK_SIZES if quick else SIZES:
        with connection.cursor() as cursor:  # each size gets the table to itself (no ORM cascade: too many rows)
            cursor.execute(f"DELETE FROM {Message._meta.db_table}")
            cursor.execute(f"DELETE FROM {Session._meta.db_table}")
        boot = tenant_bootstrap(tenant_slug=f"bench-{size}", qor_slug="aria", owner_username=f"owner-{size}")
        other = tenant_bootstrap(tenant_slug=f"other-{size}", qor_slug="aria", owner_username=f"other-{size}")
        log(f"{name}: filling 2 × {label(size)} messages")
        fill_s = 0.0
        for each in (other, boot):
            session = session_resolve(tenant=each.tenant, qor=each.qor, channel="web", user=each.owner)
            fill_s += fill(session, size, pg, content=content)
        settle(pg)
        log(f"{name}: filled in {fill_s:.1f} s; measuring")
        for kind, texts in asked.items():
            row = {"db": name, "messages": size, "mode": kind, **measure((boot.tenant, boot.qor, boot.owner), texts)}
            rows.append(row)
            log(f"{name}: {json.dumps(row)}")
        times = migration_times(name)
        if times is not None:
            row = {"db": name, "messages": size, "mode": "migration 0010", **times}
            rows.append(row)
            log(f"{name}: {json.dumps(row)}")
    print(json.dumps({"bench": "history_search", "rows": rows}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k messages only")
    parser.add_argument("--db", choices=["sqlite", "postgres"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    return child(args.quick) if args.db else parent(args.quick)


if __name__ == "__main__":
    sys.exit(main())
