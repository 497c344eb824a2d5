"""A failure stays where it happened: tenant B's reply latency, quiet and while tenant A
is in trouble.

Usage: ``python bench/isolation.py [--quick]`` (normally through ``bench/run.py``).

Two tenants, each with a Qor and an owner; B writes to its Qor through the JSON API
(``POST /v1/qors/<qor>/messages``, bearer token), one message at a time, each waiting for
its reply. Measured per message: from B's message being accepted (the stored message's
``created_at`` in the POST's answer) to B's assistant reply being stored (its
``created_at``, read back by polling ``GET /v1/qors/<qor>/messages``).

In every case but ``quiet`` and ``a_overlaps``, A writes once before each of B's messages
and B writes when A's message has reached its fault (in the control: its reply), so what
B measures is what A's fault does to B, while the fault keeps piling up:

- ``quiet``: A is idle (the base of the ratios);
- ``a_writes``: A writes on the API and nothing is wrong; B writes once A's reply is
  stored — the control: A's same traffic with no fault;
- ``platform_hangs``: A's Qor has a Telegram binding whose API (``TELEGRAM_API_BASE``)
  is a local server that accepts connections and never answers; A's paired user writes on
  Telegram (webhook) and B writes once A's reply is stored, so A's replies pile up stuck
  sending;
- ``stale_lease``: A's active canonical session holds a turn lease of a foreign owner,
  120 s from expiry (it outlasts the case), as a turn that died with its server leaves it; A writes on the API and
  B writes once A's message is stored (its turn cannot start);
- ``slow_model``: the model server (a fake OpenAI-compatible one in this process, SSE when
  asked to stream) takes 10 s on any request whose messages mention A's user, and answers
  at once otherwise; A writes on the API and B writes once the model holds A's request
  (A's later messages queue behind that turn);
- ``a_overlaps``: A writes on the API just before each of B's messages without waiting,
  nothing wrong — reported, not a goal: two turns at once on this machine's CPUs (and, on
  the embedded default, one process's interpreter lock), what concurrent load costs B.

Two layouts, each against real server processes started here:

- ``embedded``: one ``qorven serve`` (a SQLite file in a temporary directory, no Redis, no
  broker: tasks run on the Celery worker embedded in it);
- ``postgres+redis``: ``qorven serve`` plus ``qorven worker --concurrency 4`` on a fresh
  PostgreSQL database (``$BENCH_POSTGRES_URL``, default
  ``postgres://postgres@127.0.0.1:5432/qorven_bench_isolation``, created and dropped here)
  and Redis database 5 (``$BENCH_REDIS_URL``; flushed before, between cases and after).
  Skipped with a note when either is unreachable.

Every case runs on freshly started processes (after a warm-up of two B messages and one A
message), on fresh conversations (the previous case's are archived, so every case sends
the model the same history lengths), and what the previous case left in the database
(leases of killed turns, A's unanswered messages and unsent replies) is closed first, so
each case measures its own fault.
Every case has a deadline (120 s, --quick 8 s): messages not sent by then are left out,
and a reply not stored by then (or within 60 s) is a miss, counted at the time waited — so
with misses a p99 is a lower bound. Goal (reported, not asserted): B's p99 with each fault
within 1.5× of quiet, on each layout. Each fault's p99 is also given against the control
(A's same load with nothing wrong): what the fault itself adds.

Everything stays on 127.0.0.1; every process started here is killed at the end (also on
errors), the temporary directory and the bench database are removed. Progress goes to
stderr; the last stdout line is ``{"bench": "isolation", "rows": [...], "notes": [...]}``.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _servers
from _common import Row, log, met
from _servers import (
    FakeModel,
    FakeTelegram,
    Helper,
    Servers,
    base_env,
    django_setup,
    drop_postgres,
    flush_redis,
    helper_loop,
    kill_on_exit,
    pct,
    stamp,
    stop_all,
    unreachable,
)

DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/qorven_bench_isolation"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/5"
FAULTS = ("platform_hangs", "stale_lease", "slow_model")
CONTROL = "a_writes"  # A writes as in the fault cases, with nothing wrong: what A's traffic alone costs B
OVERLAP = "a_overlaps"  # A's turns at the same time as B's: CPU contention, reported, not a goal
CASES = ("quiet", CONTROL, *FAULTS, OVERLAP)  # the order of the rows
RUN_ORDER = ("quiet", CONTROL, OVERLAP, "platform_hangs", "slow_model", "stale_lease")  # leftovers harm no later case
ONLY: list[str] = list(CASES)  # --case narrows it (quiet and the control always run)
FAULT_STATE_TIMEOUT = 30.0  # at most this long B waits for A's message to reach its fault
GOAL_RATIO = 1.5
MESSAGE_TIMEOUT = 60.0
CASE_DEADLINE, QUICK_CASE_DEADLINE = 120.0, 8.0
WARMUP_TIMEOUT = 90.0
SLOW_MODEL_SECONDS = 10.0
STALE_LEASE_SECONDS = 120  # outlasts the case: the fault holds from its first message to its last
POLL_SECONDS = 0.05
USER_A, USER_B = "alpha_user", "bravo_user"  # the fake model recognises A's requests by A's name
TG_SECRET, TG_USER_ID = "bench-isolation-secret", 4242


# --- the database helper: one Django process per layout, commands on stdin -----------------

HELPER_SETUP = f"""
tokens = {{}}
call_command("migrate", interactive=False, verbosity=0)
for side, user in (("a", "{USER_A}"), ("b", "{USER_B}")):
    call_command("bootstrap", tenant=f"tenant-{{side}}", qor=f"qor-{{side}}", owner=user, stdout=StringIO())
    tenant = Tenant.objects.get(slug=f"tenant-{{side}}")
    tokens[side] = api_token_create(tenant=tenant, user=User.objects.get(username=user), name="bench")[1]
tenant_a = Tenant.objects.get(slug="tenant-a")
binding_create(tenant=tenant_a, qor=Qor.objects.get(tenant=tenant_a, slug="qor-a"), kind="telegram",
               credentials={{"token": "111:AAA", "secret": "{TG_SECRET}", "username": "qor_a_bot"}})
Identity.objects.update_or_create(
    tenant=tenant_a, channel="telegram", external_id="{TG_USER_ID}",
    defaults={{"user": User.objects.get(username="{USER_A}"), "approval": Identity.Approval.APPROVED,
              "trust_level": "owner", "display_name": "Alpha"}})
result = tokens
"""


def helper_main() -> int:
    """Run the parent's commands against $DATABASE_URL (_servers.helper_loop). Started by
    the parent with the servers' environment."""
    django_setup()
    from datetime import timedelta
    from io import StringIO

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db.models import Count
    from django.utils import timezone

    from channels_app.models import Identity, OutboundDelivery
    from channels_app.services import binding_create
    from sessions_app.models import Message, Session
    from sessions_app.services.lifecycle import session_rotate
    from sessions_app.services.resolve import session_resolve
    from tenancy.models import Qor, Tenant
    from tenancy.services import api_token_create

    User = get_user_model()

    def a_session() -> Session:
        tenant = Tenant.objects.get(slug="tenant-a")
        return session_resolve(tenant=tenant, qor=Qor.objects.get(tenant=tenant, slug="qor-a"), channel="web",
                               user=User.objects.get(username=USER_A))

    def setup() -> Any:
        scope = {"call_command": call_command, "StringIO": StringIO, "Tenant": Tenant, "Qor": Qor, "User": User,
                 "api_token_create": api_token_create, "binding_create": binding_create, "Identity": Identity}
        exec(HELPER_SETUP, scope)
        return scope["result"]

    def leftovers_clear() -> Any:
        """What an earlier case's fault left (leases of killed turns, A's unanswered
        messages, A's unsent replies) is closed, so each case measures its own fault."""
        tenant = Tenant.objects.get(slug="tenant-a")
        return {
            "leases": Session.objects.exclude(turn_owner="").update(turn_owner="", turn_lease_until=None),
            "messages": Message.objects.filter(tenant=tenant, answer_state=Message.Answer.PENDING)
            .update(answer_state=Message.Answer.FAILED),
            "deliveries": OutboundDelivery.objects.filter(tenant=tenant, state__in=["pending", "sending"])
            .update(state="failed", last_error="closed by the benchmark between cases"),
        }

    def conversations_fresh() -> Any:
        """Every case starts both users on an empty chat (the old ones archived), so no case
        sends the model a longer history than another because it ran later."""
        sessions = list(Session.objects.filter(kind=Session.Kind.CANONICAL, state=Session.State.ACTIVE))
        for session in sessions:
            session_rotate(session=session)  # as /clear does
        return {"archived": len(sessions)}

    def stale_lease() -> Any:
        session = a_session()
        until = timezone.now() + timedelta(seconds=STALE_LEASE_SECONDS)
        Session.objects.filter(pk=session.pk).update(turn_owner=f"dead-server-{uuid.uuid4().hex[:8]}",
                                                     turn_lease_until=until)
        return {"session": session.pk, "until": until.isoformat()}

    def stats() -> Any:
        """What A's trouble looks like from the database (for the log)."""
        tenant = Tenant.objects.get(slug="tenant-a")
        deliveries = dict(OutboundDelivery.objects.filter(tenant=tenant).values_list("state")
                          .annotate(n=Count("pk")).values_list("state", "n"))
        roles = dict(Message.objects.filter(tenant=tenant).values_list("role").annotate(n=Count("pk"))
                     .values_list("role", "n"))
        lease = Session.objects.filter(tenant=tenant).exclude(turn_owner="").values_list("turn_owner", flat=True)
        return {"a_deliveries": deliveries, "a_messages": roles, "a_leases": list(lease)}

    commands: dict[str, Callable[[], Any]] = {"setup": setup, "leftovers_clear": leftovers_clear,
                                              "conversations_fresh": conversations_fresh,
                                              "stale_lease": stale_lease, "stats": stats}
    return helper_loop(commands)


# --- one layout: processes, clients, cases --------------------------------------------------


@dataclass
class CaseResult:
    latencies: list[float] = field(default_factory=list)  # ms; misses at the time waited
    misses: int = 0
    sent: int = 0
    planned: int = 0
    accept_ms: list[float] = field(default_factory=list)  # the POSTs' own round trips




class Layout(Servers):
    """One layout's processes (_servers.Servers) and the clients that talk to them."""

    def __init__(self, name: str, env: dict[str, str], tmp: Path, worker: bool, redis_url: str | None) -> None:
        super().__init__(name, env, tmp, worker, redis_url)
        self.tokens: dict[str, str] = {}
        self.update_ids = itertools.count(1)

    # clients

    def post_message(self, http: Any, side: str, content: str) -> dict[str, Any]:
        response = http.post(f"{self.base}/v1/qors/qor-{side}/messages", json={"content": content},
                             headers={"Authorization": f"Bearer {self.tokens[side]}"}, timeout=30)
        if response.status_code not in (200, 201):
            raise RuntimeError(f"POST as {side} answered {response.status_code}: {response.text[:200]}")
        return response.json()["message"]

    def post_telegram(self, http: Any, text: str) -> None:
        update_id = next(self.update_ids)
        update = {"update_id": update_id, "message": {
            "message_id": update_id, "date": int(time.time()), "text": text,
            "from": {"id": TG_USER_ID, "is_bot": False, "first_name": "Alpha"},
            "chat": {"id": TG_USER_ID, "type": "private", "first_name": "Alpha"}}}
        response = http.post(f"{self.base}/v1/webhooks/telegram", json=update, timeout=30,
                             headers={"X-Telegram-Bot-Api-Secret-Token": TG_SECRET})
        if response.status_code != 200:
            raise RuntimeError(f"Telegram webhook answered {response.status_code}: {response.text[:200]}")

    def wait_reply(self, http: Any, side: str, after_seq: int | None, nonce: str,
                   until: float) -> dict[str, Any] | None:
        """The side's assistant reply containing `nonce`, stored after `after_seq` (None:
        among the newest 50 messages); None at `until`."""
        url = f"{self.base}/v1/qors/qor-{side}/messages"
        headers = {"Authorization": f"Bearer {self.tokens[side]}"}
        params = {"limit": 50} if after_seq is None else {"after_seq": after_seq, "limit": 50}
        while time.monotonic() < until:
            try:
                response = http.get(url, params=params, headers=headers, timeout=10)
                for message in response.json().get("messages", []) if response.status_code == 200 else []:
                    if message["role"] == "assistant" and nonce in message["content"]:
                        return message
            except Exception as exc:  # a slow or failed poll is retried until the deadline
                log(f"{self.name}: poll failed ({type(exc).__name__}); retrying")
            time.sleep(POLL_SECONDS)
        return None

    def exchange(self, http: Any, side: str, text: str, until: float, result: CaseResult | None = None) -> bool:
        """Send one message and wait for its reply; record it in `result`. True if answered."""
        nonce = f"n{uuid.uuid4().hex[:12]}"
        sent = time.perf_counter()
        try:
            message = self.post_message(http, side, f"{text} [{nonce}]")
        except Exception as exc:
            log(f"{self.name}: {side}'s POST failed: {exc}")
            if result is not None:
                result.sent += 1
                result.misses += 1
                result.latencies.append((time.perf_counter() - sent) * 1000)
            return False
        if result is not None:
            result.sent += 1
            result.accept_ms.append((time.perf_counter() - sent) * 1000)
        reply = self.wait_reply(http, side, message["seq"], nonce, min(until, time.monotonic() + MESSAGE_TIMEOUT))
        if result is not None:
            if reply is None:
                result.misses += 1
                result.latencies.append((time.time() - stamp(message["created_at"])) * 1000)
            else:
                result.latencies.append((stamp(reply["created_at"]) - stamp(message["created_at"])) * 1000)
        return reply is not None


def a_writes(layout: Layout, http: Any, model: FakeModel, case: str, i: int, until: float) -> None:
    """A's one message before B's i-th, returning when it has reached the case's state:
    its reply stored (control; platform_hangs: the reply's send then hangs or queues behind
    the hung one), stored (stale_lease; a_overlaps, which does not wait), or held by the
    model (slow_model's first; the later ones queue behind that turn)."""
    nonce = f"a{uuid.uuid4().hex[:12]}"
    if case == "platform_hangs":
        layout.post_telegram(http, f"A on Telegram {i} [{nonce}]")
        if layout.wait_reply(http, "a", None, nonce, until) is None:
            log(f"{layout.name}/{case}: A's reply {i} not stored in time; B writes anyway")
        return
    slowed = model.slowed
    message = layout.post_message(http, "a", f"A writes {i} [{nonce}]")
    if case == CONTROL and layout.wait_reply(http, "a", message["seq"], nonce, until) is None:
        log(f"{layout.name}/{case}: A's reply {i} not stored in time; B writes anyway")
    if case == "slow_model" and i == 0:
        while model.slowed == slowed and time.monotonic() < until:
            time.sleep(POLL_SECONDS)


def run_case(layout: Layout, helper: Helper, model: FakeModel, telegram: FakeTelegram, case: str, n: int,
             deadline_s: float) -> CaseResult:
    import httpx

    helper("leftovers_clear")  # what the last case's fault and its killed processes left behind
    helper("conversations_fresh")  # the same history length for B (and A) in every case
    begun = time.monotonic()
    layout.start(case)
    up = time.monotonic()
    result = CaseResult(planned=n)
    try:
        with httpx.Client() as http:
            warm_until = time.monotonic() + WARMUP_TIMEOUT
            for i in range(2):
                if not layout.exchange(http, "b", f"warm-up {i}", warm_until):
                    raise RuntimeError(f"{layout.name}/{case}: B's warm-up got no reply in {WARMUP_TIMEOUT:.0f} s")
            if not layout.exchange(http, "a", "warm-up", warm_until):
                raise RuntimeError(f"{layout.name}/{case}: A's warm-up got no reply in {WARMUP_TIMEOUT:.0f} s")
            if case == "platform_hangs":
                telegram.start_hanging()
            elif case == "stale_lease":
                log(f"{layout.name}/{case}: A's session {helper('stale_lease')['session']} now holds a foreign lease")
            elif case == "slow_model":
                model.slow = True
            started = time.monotonic()
            log(f"{layout.name}/{case}: processes up in {up - begun:.1f} s, warmed up in {started - up:.1f} s")
            until = started + deadline_s
            for i in range(n):
                if time.monotonic() >= until:
                    break
                if case != "quiet":
                    a_writes(layout, http, model, case, i, min(until, time.monotonic() + FAULT_STATE_TIMEOUT))
                layout.exchange(http, "b", f"B asks {case} {i}", until, result)
            log(f"{layout.name}/{case}: {result.sent}/{n} sent, {result.misses} missed in"
                f" {time.monotonic() - started:.1f} s; A: {json.dumps(helper('stats'))}"
                + (f"; Telegram calls hung: {telegram.hung}" if case == "platform_hangs" else "")
                + (f"; model requests slowed: {model.slowed}" if case == "slow_model" else ""))
    except Exception:
        log(f"{layout.name}/{case} failed; server log tail:\n{layout.log_tail()}")
        raise
    finally:
        layout.stop()
        model.slow = False
        telegram.release()  # after the stop: A's hung sends end with their process, not by going through
    return result


def run_layout(name: str, env: dict[str, str], tmp: Path, worker: bool, redis_url: str | None,
               model: FakeModel, telegram: FakeTelegram, n: int, deadline_s: float) -> dict[str, CaseResult]:
    layout = Layout(name, env, tmp, worker, redis_url)
    if redis_url:
        flush_redis(redis_url)
    helper = Helper(__file__, env, tmp / f"{name}-helper.log")
    try:
        started = time.monotonic()
        layout.tokens = helper("setup")
        log(f"{name}: migrated and set up two tenants in {time.monotonic() - started:.1f} s")
        results = {}
        for case in [c for c in RUN_ORDER if c in ONLY or c in ("quiet", CONTROL)]:
            started = time.monotonic()
            results[case] = run_case(layout, helper, model, telegram, case, n, deadline_s)
            p50, p99 = pct(results[case].latencies) if results[case].latencies else (0.0, 0.0)
            slowest = ", ".join(f"{v:.0f}" for v in sorted(results[case].latencies)[-4:])
            log(f"{name}/{case}: B reply p50 {p50:.0f} ms, p99 {p99:.0f} ms, slowest {slowest} ms"
                f" ({time.monotonic() - started:.1f} s)")
        return results
    finally:
        helper.close()
        layout.stop()


# --- parent -------------------------------------------------------------------------------


def rows_and_notes(layout: str, results: dict[str, CaseResult]) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    notes: list[str] = []
    quiet = results["quiet"]
    quiet_p99 = pct(quiet.latencies)[1] if quiet.latencies else 0.0
    control = results[CONTROL]
    control_p99 = pct(control.latencies)[1] if control.latencies else 0.0
    for case in [c for c in CASES if c in results]:
        res = results[case]
        p50, p99 = pct(res.latencies) if res.latencies else (None, None)
        ratio = round(p99 / quiet_p99, 2) if p99 is not None and quiet_p99 else None
        beyond_load = round(p99 / control_p99, 2) if p99 is not None and control_p99 else None
        row: Row = {"mode": f"{layout}/{case}", "B reply p50 ms": p50, "B reply p99 ms": p99,
                    "ratio p99 fault/quiet": 1.0 if case == "quiet" else ratio,
                    "ratio p99 fault/control": beyond_load if case in FAULTS else None,
                    "B sent": res.sent, "B missed": res.misses}
        if res.accept_ms:
            row["B POST p99 ms"] = pct(res.accept_ms)[1]
        rows.append(row)
        if case == CONTROL:
            notes.append(f"{layout}/{CONTROL} (control, no fault): B p99 {p99} ms = {ratio}× quiet")
        if case == OVERLAP:
            notes.append(f"{layout}/{OVERLAP} (A's turns at the same time as B's, no fault; not a goal):"
                         f" B p99 {p99} ms = {ratio}× quiet — what sharing the CPUs costs")
        if case in ("quiet", CONTROL, OVERLAP):
            continue
        ok = ratio is not None and ratio <= GOAL_RATIO and res.misses == 0 and res.sent == res.planned
        bound = " (a lower bound: replies missed)" if res.misses else ""
        short = f"; only {res.sent}/{res.planned} sent before the case's deadline" if res.sent < res.planned else ""
        notes.append(f"{layout}/{case}: B p99 {p99} ms{bound} vs quiet {quiet_p99} ms = {ratio}×"
                     f"{short} (goal ≤ {GOAL_RATIO}×: {met(ok)}); vs the control's {control_p99} ms = {beyond_load}×"
                     f" (what the fault adds to A's load)")
    if quiet.misses:
        notes.append(f"{layout}/quiet: {quiet.misses} of B's replies missed with no fault at all")
    return rows, notes


def parent(quick: bool) -> int:
    n = 5 if quick else 200
    deadline_s = QUICK_CASE_DEADLINE if quick else CASE_DEADLINE
    pg_url = os.environ.get("BENCH_POSTGRES_URL", DEFAULT_PG_URL)
    redis_url = os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    kill_on_exit()
    rows: list[Row] = []
    notes: list[str] = []
    failed = False
    model, telegram = FakeModel(slow_marker=USER_A, slow_seconds=SLOW_MODEL_SECONDS), FakeTelegram()
    tmp = tempfile.TemporaryDirectory(prefix="qorven-bench-isolation-")
    pg_created = False
    try:
        common = {**base_env(), "OPENAI_BASE_URL": model.url, "OPENAI_API_KEY": "bench-key",
                  "QORVEN_MODEL": "bench-model", "TELEGRAM_API_BASE": telegram.url}
        layouts: list[tuple[str, dict[str, str], bool, str | None]] = [
            ("embedded", {**common, "DATABASE_URL": f"sqlite:///{Path(tmp.name) / 'embedded.sqlite3'}"}, False, None)
        ]
        why_not = "--embedded-only" if os.environ.get("BENCH_SKIP_POSTGRES") else unreachable(pg_url, redis_url)
        if why_not:
            log(f"postgres+redis skipped: {why_not}")
            notes.append(f"postgres+redis: skipped, {why_not}")
        else:
            pg_created = True
            layouts.append(("postgres+redis", {**common, "DATABASE_URL": pg_url, "REDIS_URL": redis_url}, True,
                            redis_url))
        for name, env, worker, layout_redis in layouts:
            started = time.monotonic()
            try:
                results = run_layout(name, env, Path(tmp.name), worker, layout_redis, model, telegram, n, deadline_s)
            except Exception as exc:
                log(f"{name}: FAILED: {exc}")
                notes.append(f"{name}: FAILED ({exc})")
                failed = True
                continue
            layout_rows, layout_notes = rows_and_notes(name, results)
            rows += layout_rows
            notes += layout_notes
            log(f"{name}: done in {time.monotonic() - started:.0f} s")
    finally:
        stop_all()
        model.stop()
        telegram.stop()
        if pg_created:
            drop_postgres(pg_url)
            flush_redis(redis_url)
        tmp.cleanup()
    notes += [
        f"B: {n} messages one after another per case, each waiting for its reply; A writes one before each"
        " (not in quiet) and B writes once A's has reached its fault (control: its reply; a_overlaps: at once);"
        f" latency = B's message stored → B's reply stored (server timestamps); every case on fresh processes",
        f"a case stops at {deadline_s:.0f} s: a reply missing by then is a miss counted at the time waited",
        "embedded: one `qorven serve` on SQLite, tasks on its embedded worker;"
        " postgres+redis: `qorven serve` + `qorven worker --concurrency 4`",
        f"everything (servers, worker, fakes, PostgreSQL, Redis) shares this machine's {os.cpu_count()} CPUs:"
        " a_overlaps shows what two turns at once cost B here; fault/control is what the fault itself adds",
    ]
    if quick:
        notes.append(f"--quick: {n} messages per case, a {deadline_s:.0f} s deadline; the goal is for the full run")
    for note in notes:
        log(note)
    print(json.dumps({"bench": "isolation", "rows": rows, "notes": notes}))
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 messages per case (a smoke run)")
    parser.add_argument("--helper", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--case", action="append", choices=CASES, metavar="CASE",
                        help=f"run only this case (repeatable; quiet and the control always run): {', '.join(CASES)}")
    parser.add_argument("--embedded-only", action="store_true", help="skip the PostgreSQL + Redis layout")
    parser.add_argument("--profile", metavar="DIR", default="",
                        help="sample every server and worker with py-spy (pip install py-spy) into DIR")
    args = parser.parse_args()
    _servers.PROFILE_DIR = args.profile
    ONLY[:] = args.case or CASES
    if args.embedded_only:
        os.environ["BENCH_SKIP_POSTGRES"] = "1"
    return helper_main() if args.helper else parent(args.quick)


if __name__ == "__main__":
    sys.exit(main())
