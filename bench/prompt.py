"""Prompt assembly time as the stored history grows.

Usage: ``python bench/prompt.py [--quick]`` (normally through ``bench/run.py``).

Runs on SQLite (always, in a fresh temporary file, never the dev db.sqlite3) and on
PostgreSQL when reachable at ``$BENCH_POSTGRES_URL`` (default
``postgres://postgres@127.0.0.1:5432/qorven_bench_prompt``; that database is dropped and
recreated at the start of each run). Each database runs in its own subprocess
(``--db sqlite|postgres``) and this parent merges their rows.

Per database: one canonical session per size (100, 10k, 1M messages; --quick: 100, 10k,
100k), each with its own user, all in the same table, bulk-filled server-side with
alternating user/assistant messages of 100–400 characters (so the 8,192-token window holds
tens of them), the newest a user message still waiting for its answer
(``replied_through_seq = last_seq - 1``). Each user has 200 memories and the tenant 5
learned skills, so retrieval does real work. The Qor has a model configured, so the turn
offers tools. Timed, p50 and p99 over CALLS calls after WARMUP, in rounds that call every
size in a random order so drift hits all alike:

- ``turn``: ``qorven.agent.turn_answer.turn_prompt`` — what a turn does to build its request:
  skills and memory retrieval, then ``prompt_build``;
- ``build``: ``prompt_build`` alone, with the same parts precomputed;
- ``naive``: the baseline the builder avoids, loading the whole session
  (``list(Message.objects.filter(session=s).order_by("seq"))``). Bounded to keep the run
  short: at most NAIVE_MAX rows (a bigger session loads only its first NAIVE_MAX, a lower
  bound of the whole) and at most NAIVE_SECONDS of calls per size.

Goal (reported, not asserted): at the largest size, p50 within 1.2x of the 100-message size.

Progress goes to stderr; the last stdout line is the JSON result of bench/run.py's protocol.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from _common import (
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

DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/qorven_bench_prompt"
SIZES, QUICK_SIZES = (100, 10_000, 1_000_000), (100, 10_000, 100_000)
CALLS, WARMUP = 100, 10
NUM_CTX, RESERVE = 8192, 1024
MEMORIES, SKILLS = 200, 5
NAIVE_MAX, NAIVE_SECONDS, NAIVE_MIN_CALLS = 100_000, 10.0, 3
GOAL = 1.2

_WORDS = (
    "garden tomato basil watering weekend trip train ticket Lisbon museum dentist appointment"
    " Tuesday invoice client project deadline report budget meeting coffee running shoes"
    " marathon training plan recipe lasagna oven groceries birthday present sister concert"
    " guitar lesson python script database backup server migration holiday flight hotel"
    " booking passport renewal insurance doctor vitamins sleep schedule morning routine"
    " reading novel library podcast episode bicycle repair weather forecast umbrella"
).split()


def _text(rng: random.Random, chars: int) -> str:
    """Words from _WORDS, at most `chars` characters (and at least `chars` - 12)."""
    text = rng.choice(_WORDS)
    while len(text) + 1 + len(word := rng.choice(_WORDS)) <= chars:
        text += " " + word
    return text


# Message n says snippet n % 53 (53: prime, so the pattern never lines up with the
# builder's batches): whole words, 100–400 characters. Words and spaces only, so the
# snippets are safe to inline as SQL literals.
_rng = random.Random(7)
SNIPPETS = [_text(_rng, _rng.randint(112, 400)) for _ in range(53)]
CONTENT_SQL = (
    f"CASE n %% {len(SNIPPETS)} "
    + " ".join(f"WHEN {i} THEN '{text}'" for i, text in enumerate(SNIPPETS))
    + " END"
)


def newest_is_user(size: int) -> str:
    """Alternating roles ending with a user message at seq `size`."""
    return f"CASE WHEN ({size} - n) %% 2 = 0 THEN 'user' ELSE 'assistant' END"


# --- parent ------------------------------------------------------------------------------


def goal_notes(rows: list[Row], quick: bool) -> list[str]:
    """The goal beside the figures; reported, not asserted."""
    notes = []
    for db in dict.fromkeys(row["db"] for row in rows):
        mine = sorted((r for r in rows if r["db"] == db), key=lambda r: r["size"])
        first, second, last = mine[0], mine[1], mine[-1]
        span, tail = (f"{label(last['size'])}/{label(r['size'])}" for r in (first, second))
        for what, key in (("turn_prompt (turn)", "turn"), ("prompt_build alone", "build")):
            ratio = last[f"{key}_ratio"]
            flat = last[f"{key}_p50_ms"] / second[f"{key}_p50_ms"]
            p99 = last[f"{key}_p99_ms"] / first[f"{key}_p99_ms"]
            notes.append(
                f"{db}: {what} p50 {span} = {ratio:.2f}"
                f" (goal within {GOAL}x: {met(ratio <= GOAL)});"
                f" p50 {tail} = {flat:.2f}; p99 {span} = {p99:.2f}"
            )
        loads = ", ".join(f"{naive_label(r)} {r['naive_p50_ms']:,.1f} ms" for r in mine)
        times = last["naive_p50_ms"] / last["turn_p50_ms"]
        notes.append(
            f"{db}: naive load p50: {loads}; at {naive_label(last)}: {times:,.0f}x"
            " the turn's whole prompt"
        )
    if any(r["rows_read"] != rows[-1]["rows_read"] for r in rows):
        notes.append(
            "rows_read: the builder reads whole batches of 64 until the budget is full, so it"
            " loads the 100-message session once (100 rows) and larger ones as two batches"
            " (128 rows); that, not history length, is most of the ratio to 100, which is why"
            " the ratio to 10k is shown too"
        )
    notes.append(
        f"naive baseline bounded to keep the run short: at most {label(NAIVE_MAX)} rows (a"
        f" larger session loads only its first {label(NAIVE_MAX)}, a lower bound of the whole"
        f" load) and p50 over up to {CALLS} calls or {NAIVE_SECONDS:.0f} s per size"
    )
    if quick:
        notes.append("--quick: the largest size is 100k, not 1M; the goal is for the full run")
    return notes


def naive_label(row: Row) -> str:
    if row["naive_rows"] == row["size"]:
        return label(row["size"])
    return f"{label(row['size'])} (first {label(row['naive_rows'])} rows)"


def parent(quick: bool) -> int:
    pg_url = os.environ.get("BENCH_POSTGRES_URL", DEFAULT_PG_URL)
    rows, notes, failed = run_databases(__file__, pg_url, quick)
    notes = (goal_notes(rows, quick) if rows else []) + notes
    for note in notes:
        log(note)
    print(json.dumps({"bench": "prompt", "rows": rows, "notes": notes}))
    return 1 if failed else 0


# --- child: one database, Django configured for it ----------------------------------------


@dataclass
class Case:
    """One size: its session, and the calls timed on it."""

    size: int
    session: Session
    fill_s: float
    calls: dict[str, Callable[[], int]] = field(default_factory=dict)
    ms: dict[str, list[float]] = field(default_factory=dict)


def setup(quick: bool, pg: bool, name: str) -> list[Case]:
    """Tenant, Qor with a model, skills; per size a user with memories and a filled session."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from memory_app.models import LearnedSkill, Memory
    from memory_app.services import memory_add
    from sessions_app.models import Message, Session
    from sessions_app.services.resolve import session_resolve
    from tenancy.services import tenant_bootstrap

    call_command("migrate", verbosity=0)
    boot = tenant_bootstrap(tenant_slug="bench", qor_slug="bench", owner_username="bench-owner")
    rng = random.Random(11)
    qor = boot.qor
    qor.main_model, qor.main_num_ctx = "bench-model", NUM_CTX  # a model: the turn offers tools
    qor.project_context = _text(rng, 400)
    qor.save(update_fields=["main_model", "main_num_ctx", "project_context", "updated_at"])
    for i in range(SKILLS):
        LearnedSkill.objects.create(
            tenant=boot.tenant,
            name=f"bench-skill-{i}",
            description=_text(rng, 80),
            body=_text(rng, 600),
        )
    kinds = (Memory.Type.FACT, Memory.Type.LESSON, Memory.Type.REMINDER)
    memories = [(kinds[i % 3], f"{i}: {_text(rng, 60 + i % 120)}") for i in range(MEMORIES)]
    cases = []
    for size in QUICK_SIZES if quick else SIZES:
        user = get_user_model().objects.create(username=f"bench-{size}")
        session = session_resolve(tenant=boot.tenant, qor=qor, channel="web", user=user)
        seconds = fill(session, size, pg, role=newest_is_user(size), content=CONTENT_SQL)
        Session.objects.filter(pk=session.pk).update(replied_through_seq=size - 1)
        # The newest message waits for its answer, as one a person just sent does.
        Message.objects.filter(session=session, seq=size, role=Message.Role.USER).update(
            answer_state=Message.Answer.PENDING)
        for kind, content in memories:
            memory_add(tenant=boot.tenant, qor=qor, user=user, type=kind, content=content)
        log(f"{name}: filled {label(size)} in {seconds:.1f} s")
        cases.append(Case(size, session, seconds))
    return cases


def prepare(case: Case) -> Row:
    """Load the session as a turn does and set up the timed calls; return its facts."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from qorven.agent.prompt import PromptParts, prompt_build
    from qorven.agent.retrieval import memories_for, skills_for_prompt
    from memory_app.selectors import skills_for
    from qorven.agent.turn_answer import turn_prompt
    from qorven.llm import route_for
    from sessions_app.models import Message
    from sessions_app.selectors import next_pending_user_message, session_get
    from tenancy.tool_registry import registry
    from tenancy.trust import Trust

    # As turn_process and answer_message do: reload, find the pending message, route and tools.
    old = case.session
    session = session_get(tenant=old.tenant, session_id=old.pk)
    qor = session.qor
    pending = next_pending_user_message(session=session)
    if pending is None or pending.seq != case.size:
        raise AssertionError(
            f"pending message is {pending}, expected the user message #{case.size}"
        )
    trust = str(pending.metadata.get("trust") or Trust.PAIRED)
    route = route_for(qor, "main")
    offered = registry.offered(tenant=session.tenant, qor=qor, trust=trust)
    if route.offline or route.num_ctx != NUM_CTX or not offered:
        raise AssertionError(f"route {route} with {len(offered)} tools: expected a model and tools")
    parts = PromptParts(  # what turn_prompt passes, computed once
        system_prompt=qor.system_prompt,
        project_context=qor.project_context,
        skills=skills_for_prompt(tenant=session.tenant, trust=trust),
        memories=memories_for(
            tenant=session.tenant, qor=qor, user=session.user, query=pending.content
        ),
        compaction_note="\n\n".join(
            p for p in (session.seed_summary, session.compaction_note) if p.strip()
        ),
        surface_note=(
            f"The current message came from the {pending.channel} surface; answer for that surface."
        ),
    )
    if len(parts.memories) < 5 or len(parts.skills) < SKILLS:
        raise AssertionError(
            f"retrieval found {len(parts.memories)} memories, {len(parts.skills)} skills"
        )

    def turn() -> int:
        skills = skills_for(tenant=session.tenant, trust=trust)  # read by the turn, then passed in
        return len(turn_prompt(session=session, qor=qor, pending=pending, offered=offered, route=route,
                               trust=trust, reserve=RESERVE, skills=skills).window)

    def build() -> int:
        prompt = prompt_build(
            session=session,
            parts=parts,
            tools=offered,
            current=pending,
            num_ctx=route.num_ctx,
            reserve=RESERVE,
        )
        return len(prompt.window)

    case.calls = {"turn": turn, "build": build}
    facts = {"rows_read": rows_read(build)}
    prompt = turn_prompt(session=session, qor=qor, pending=pending, offered=offered, route=route, trust=trust,
                         reserve=RESERVE, skills=skills_for(tenant=session.tenant, trust=trust))
    if prompt.window[-1].pk != pending.pk:
        raise AssertionError("the pending message is not the last of the window")
    with CaptureQueriesContext(connection) as turn_queries:
        turn()
    with CaptureQueriesContext(connection) as build_queries:
        build()
    whole = Message.objects.filter(session=session).order_by("seq")
    naive = whole if case.size <= NAIVE_MAX else whole[:NAIVE_MAX]
    case.ms["naive"] = naive_load(lambda: len(list(naive.all())))
    return {
        **facts,
        "window": len(prompt.window),
        "tokens": prompt.estimated_tokens,
        "tools": len(offered),
        "turn_queries": len(turn_queries.captured_queries),
        "build_queries": len(build_queries.captured_queries),
    }


def rows_read(build: Callable[[], int]) -> int:
    """Messages the builder loads for one prompt (the window, plus the rest of the last
    batch), counted by wrapping its context_read for one untimed call."""
    import qorven.agent.prompt as builder
    from sessions_app.models import Message

    read, counts = builder.context_read, []

    def counting(**kwargs: Any) -> list[Message]:
        batch = read(**kwargs)
        counts.append(len(batch))
        return batch

    builder.context_read = counting
    try:
        build()
    finally:
        builder.context_read = read
    return sum(counts)


def naive_load(load: Callable[[], int]) -> list[float]:
    """Milliseconds of whole-session loads: up to CALLS, stopping after NAIVE_SECONDS."""
    load()
    ms: list[float] = []
    while len(ms) < CALLS and (len(ms) < NAIVE_MIN_CALLS or sum(ms) < NAIVE_SECONDS * 1000):
        started = time.perf_counter_ns()
        load()
        ms.append((time.perf_counter_ns() - started) / 1e6)
    return ms


def measure(cases: list[Case]) -> None:
    """CALLS timed calls of each case's calls after WARMUP.

    Each round makes one call of every (size, call) in a fresh random order, so neither
    drift nor what ran just before favours a size; a garbage collection before each call
    keeps one call's garbage from being collected in the next one's time.
    """
    order = [(case, what) for case in cases for what in case.calls]
    windows: dict[tuple[int, str], int] = {}
    shuffle = random.Random(5).shuffle
    for round_no in range(WARMUP + CALLS):
        shuffle(order)
        for case, what in order:
            gc.collect()
            started = time.perf_counter_ns()
            n = case.calls[what]()
            elapsed = (time.perf_counter_ns() - started) / 1e6
            if windows.setdefault((case.size, what), n) != n:
                raise AssertionError(
                    f"{what} at {label(case.size)}: window {n} != {windows[case.size, what]}"
                )
            if round_no >= WARMUP:
                case.ms.setdefault(what, []).append(elapsed)


def child(quick: bool) -> int:
    """Bench the database of $DATABASE_URL and print its rows."""
    django_setup()
    from django.db import connection

    pg = connection.vendor == "postgresql"
    name = "postgres" if pg else connection.vendor
    cases = setup(quick, pg, name)
    settle(pg)
    facts = {}
    for case in cases:
        log(f"{name}: preparing {label(case.size)}, timing the naive load")
        facts[case.size] = prepare(case)
    log(f"{name}: timing {CALLS} calls per size after {WARMUP} warm-up (shuffled rounds)")
    measure(cases)
    rows: list[Row] = []
    base = {what: percentiles(cases[0].ms[what])[0] for what in ("turn", "build")}
    for case in cases:
        known = facts[case.size]
        row: Row = {
            "db": name,
            "size": case.size,
            "window": known["window"],
            "rows_read": known["rows_read"],
        }
        row["turn_queries"] = known["turn_queries"]
        for what in ("turn", "build"):
            p50, p99 = percentiles(case.ms[what])
            row |= {
                f"{what}_p50_ms": p50,
                f"{what}_p99_ms": p99,
                f"{what}_ratio": round(p50 / base[what], 3),
            }
        row["naive_rows"] = min(case.size, NAIVE_MAX)
        row["naive_p50_ms"] = round(statistics.median(case.ms["naive"]), 3)
        row["naive_calls"] = len(case.ms["naive"])
        row["fill_s"] = round(case.fill_s, 2)
        rows.append(row)
        log(f"{name}: {json.dumps(row)}")
    last = facts[cases[-1].size]
    note = (
        f"{name}: per call {last['tools']} tools offered, {SKILLS} skills, {MEMORIES} memories"
        f" per user; ~{last['tokens']:,} estimated tokens of num_ctx {NUM_CTX:,} (reserve"
        f" {RESERVE:,}); {last['turn_queries']} queries per turn prompt,"
        f" {last['build_queries']} of them the builder's"
    )
    print(json.dumps({"bench": "prompt", "rows": rows, "notes": [note]}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes 100/10k/100k")
    parser.add_argument("--db", choices=["sqlite", "postgres"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    return child(args.quick) if args.db else parent(args.quick)


if __name__ == "__main__":
    sys.exit(main())
