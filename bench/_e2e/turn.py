"""bench/e2e.py's turn phase: the platform's overhead of a turn."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from _common import Row, label, log
from _servers import (
    FakeModel,
    FakeTelegram,
    pct,
)

# --- 3. turn overhead --------------------------------------------------------------------------------
from _e2e.clients import Watchers, client_session, post_json
from _e2e.common import (
    BIG_USER,
    CASE_DEADLINE,
    CONCURRENT_FIRST,
    CONCURRENT_USERS,
    Layout,
    MID_USER,
    OTHER_USER,
    PLATFORM_SENDER,
    PLATFORM_UPDATES,
    QOR,
    SEQ_USER,
    SMALL_SESSION,
    Sizes,
    TENANT,
    WAIT,
    figure,
    nonce,
)
from _e2e.ingest import WEBHOOK_HEADERS, telegram_update


@dataclass
class Turns:
    overhead_ms: list[float] = field(default_factory=list)
    model_ms: list[float] = field(default_factory=list)
    prompt_messages: list[int] = field(default_factory=list)  # what the model was sent, per turn
    post_ms: list[float] = field(default_factory=list)  # the POST's own round trip (message stored)
    model_requests: int = 0  # all requests the model had during the case (summaries, …)
    missed: int = 0

    def record(self, key: str, started: float, answered: float | None, model: FakeModel) -> None:
        """One turn, asked at `started` and answered at `answered` (perf_counter; None: no
        answer in time, counted at the time waited), less the model's own handling."""
        if answered is None:
            self.missed += 1
            self.overhead_ms.append((time.perf_counter() - started) * 1000)
            return
        model_ms = model.handled_ms.get(key, 0.0)
        self.model_ms.append(model_ms)
        self.prompt_messages.append(model.prompt_messages.get(key, 0))
        self.overhead_ms.append((answered - started) * 1000 - model_ms)


async def user_turns(http: Any, watchers: Watchers, api: str, token: str, n: int, model: FakeModel,
                     result: Turns, until: float) -> None:
    """n turns one after another: POST, then the reply's message.new on the chat's socket."""
    for i in range(n):
        if time.monotonic() > until:
            return
        key = nonce()
        watchers.expect(key)
        started = time.perf_counter()
        await post_json(http, api, {"content": f"turn {i} [{key}]"}, token)
        result.post_ms.append((time.perf_counter() - started) * 1000)
        replied = await watchers.until(lambda: key in watchers.reply_at, WAIT)
        result.record(key, started, watchers.reply_at[key] if replied else None, model)


async def platform_turns(base: str, sender: int, n: int, model: FakeModel, telegram: FakeTelegram,
                         result: Turns, until: float) -> None:
    """n Telegram turns one after another from paired `sender`: the webhook POSTed, then the
    reply's sendMessage arriving at the fake Telegram API."""
    url = f"{base}/v1/webhooks/telegram"
    async with client_session() as http:
        for _ in range(n):
            if time.monotonic() > until:
                return
            key = nonce()
            update = next(PLATFORM_UPDATES)
            body = telegram_update(update, sender, text=f"turn {update} [{key}]")
            started = time.perf_counter()
            async with http.post(url, data=body, headers=WEBHOOK_HEADERS) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"POST {url} answered {response.status}")
            result.post_ms.append((time.perf_counter() - started) * 1000)
            deadline = time.monotonic() + WAIT
            while key not in telegram.sent_at and time.monotonic() < deadline:
                await asyncio.sleep(0.001)  # the arrival's time is taken by the fake, not here
            result.record(key, started, telegram.sent_at.get(key), model)


async def platform_case(base: str, sender: int, turns: int, model: FakeModel, telegram: FakeTelegram,
                        warmup: int = 1) -> Turns:
    result, warm = Turns(), Turns()
    until = time.monotonic() + CASE_DEADLINE
    await platform_turns(base, sender, warmup, model, telegram, warm, until)
    requests = model.requests
    await platform_turns(base, sender, turns, model, telegram, result, until)
    result.model_requests = model.requests - requests
    return result


async def turn_case(base: str, tokens: list[str], turns_each: int, model: FakeModel, warmup: int = 1) -> Turns:
    """Each of `tokens`' users: a socket on their chat, `warmup` turns, then `turns_each`
    turns one after another (the users at the same time)."""
    ws_base = base.replace("http://", "ws://") + f"/ws/chat/{TENANT}/{QOR}/?token="
    api = f"{base}/v1/qors/{QOR}/messages"
    result, warm = Turns(), Turns()
    async with client_session() as http:
        watchers = Watchers()
        try:
            await watchers.connect([ws_base + t for t in tokens], base)
            until = time.monotonic() + CASE_DEADLINE
            await asyncio.gather(*(user_turns(http, watchers, api, t, warmup, model, warm, until) for t in tokens))
            requests = model.requests
            await asyncio.gather(*(user_turns(http, watchers, api, t, turns_each, model, result, until)
                                   for t in tokens))
            result.model_requests = model.requests - requests
        finally:
            await watchers.close()
    return result


async def turn_pair(base: str, tokens: tuple[str, str], turns_each: int, model: FakeModel,
                    warmup: int = 1) -> tuple[Turns, Turns]:
    """Two users, one turn of each in turn, `turns_each` each (after `warmup` each)."""
    ws_base = base.replace("http://", "ws://") + f"/ws/chat/{TENANT}/{QOR}/?token="
    api = f"{base}/v1/qors/{QOR}/messages"
    results, warm = (Turns(), Turns()), Turns()
    async with client_session() as http:
        watchers = Watchers()
        try:
            await watchers.connect([ws_base + t for t in tokens], base)
            until = time.monotonic() + CASE_DEADLINE
            for token in tokens:
                await user_turns(http, watchers, api, token, warmup, model, warm, until)
            requests = model.requests
            for _ in range(turns_each):
                for token, result in zip(tokens, results):
                    await user_turns(http, watchers, api, token, 1, model, result, until)
            for result in results:  # the requests of both, summaries included
                result.model_requests = model.requests - requests
        finally:
            await watchers.close()
    return results


@dataclass(frozen=True)
class TurnCase:
    name: str
    user: int  # index into the users' tokens (the first of `users` users)
    turns: int  # each
    users: int = 1
    fill: int = 0  # messages stored in the user's session just before (0: none added)
    warmup: int = 1  # turns each user takes first, not counted
    goal_ratio: float | None = None  # p50 within this many times the 1-user case's
    # The next case, measured at the same time: its user's turns alternate with this one's
    # (so a drift of the machine's speed during the run reaches both alike).
    alongside: bool = False
    platform: bool = False  # `user` is a paired Telegram sender, writing through the webhook


def turn_cases(sizes: Sizes) -> list[TurnCase]:
    return [
        TurnCase("1 user", SEQ_USER, sizes.turns, warmup=3),  # the first turns of fresh processes
        TurnCase("1 Telegram sender, webhook → sendMessage", PLATFORM_SENDER, sizes.turns, platform=True),
        TurnCase(f"{CONCURRENT_USERS} users at once, {sizes.turns_each} turn{'s' if sizes.turns_each > 1 else ''}"
                 " each", CONCURRENT_FIRST, sizes.turns_each, users=CONCURRENT_USERS, warmup=0),
        TurnCase(f"1 user, {label(sizes.mid)} messages in the session (prompt full)", MID_USER, sizes.turns,
                 fill=sizes.mid),
        TurnCase(f"1 user, {label(sizes.big)} messages in the session", BIG_USER, sizes.turns, fill=sizes.big,
                 goal_ratio=1.2, alongside=True),
        TurnCase(f"1 user, {label(sizes.big)} other rows in the table", OTHER_USER, sizes.turns, goal_ratio=1.2),
    ]


def turn_rows(layout: str, cases: list[tuple[TurnCase, Turns]]) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    notes: list[str] = []
    base50: float | None = None
    p50s: dict[str, float] = {}
    paired = {c.name for (a, _), (c, _) in zip(cases, cases[1:]) if a.alongside}
    paired |= {c.name for c, _ in cases if c.alongside}
    for case, result in cases:
        planned = case.turns * case.users
        asked = f"{result.model_requests} requests for {planned * (2 if case.name in paired else 1)} turns" + (
            " (this case's and the one alternated with it)" if case.name in paired else "")
        if not result.overhead_ms:
            notes.append(f"{layout}/turn {case.name}: no turn measured")
            continue
        p50, p99 = pct(result.overhead_ms, 2)
        whole = not result.missed and len(result.overhead_ms) == planned
        if case.name == "1 user":
            base50 = p50
        if case.name == "1 user" or case.platform:
            rows.append(figure(layout, f"turn: {case.name}, p50", p50, unit="ms", goal="≤ 25 ms", ok=whole and p50 <= 25))
        elif case.goal_ratio:
            rows.append(figure(layout, f"turn: {case.name}, p50", p50, unit="ms", baseline=base50,
                               goal=f"≤ {case.goal_ratio}× 1 user",
                               ok=whole and bool(base50) and p50 / base50 <= case.goal_ratio))
        else:
            rows.append(figure(layout, f"turn: {case.name}, p50", p50, unit="ms", baseline=base50))
        rows.append(figure(layout, f"turn: {case.name}, p99", p99, unit="ms"))
        model50 = pct(result.model_ms, 3)[0] if result.model_ms else 0.0
        prompt50 = pct([float(n) for n in result.prompt_messages], 0)[0] if result.prompt_messages else 0
        post50 = pct(result.post_ms, 1)[0]
        log(f"{layout}/turn {case.name}: p50 {p50} ms (of which the POST {post50} ms), p99 {p99} ms over"
            f" {len(result.overhead_ms)}/{planned} turns, {result.missed} missed; the model: p50 {model50} ms"
            f" (subtracted), {prompt50:.0f} messages a prompt, {asked}")
        notes.append(f"{layout}/turn {case.name}: p50 {p50} ms, of which the POST (message stored, turn queued)"
                     f" {post50} ms; the model was sent {prompt50:.0f} messages a turn (p50),"
                     f" {asked}")
        p50s[case.name] = p50
        if not whole:
            notes.append(f"{layout}/turn {case.name}: {len(result.overhead_ms)}/{planned} turns,"
                         f" {result.missed} without a reply in {WAIT:.0f} s (counted at the time waited)")
    for (case, _), (other, _) in zip(cases, cases[1:]):
        if case.alongside and case.name in p50s and other.name in p50s:
            rows.append(figure(layout, f"turn: {case.name} / a {SMALL_SESSION}-message session, turns alternated, p50",
                               p50s[case.name], unit="ms", baseline=p50s[other.name], goal=f"≤ {case.goal_ratio}×",
                               ok=p50s[case.name] / p50s[other.name] <= (case.goal_ratio or 0)))
    full = [c.name for c, _ in cases if c.fill and c.goal_ratio is None]  # the prompt-full session
    big = [c.name for c, _ in cases if c.fill and c.goal_ratio is not None]
    if full and big and full[0] in p50s and big[0] in p50s:
        notes.append(f"{layout}/turn: {big[0]} vs {full[0]}: p50 {p50s[big[0]] / p50s[full[0]]:.2f}× —"
                     " the stored history's size alone, both prompts full")
    return rows, notes


def turn(layout: Layout, sizes: Sizes, model: FakeModel, telegram: FakeTelegram) -> tuple[list[Row], list[str]]:
    tokens = layout.tokens["users"]
    done: list[tuple[TurnCase, Turns]] = []
    layout.start("turn")
    try:
        cases = iter(turn_cases(sizes))
        for case in cases:
            if case.fill:
                filled = layout.helper("fill_session", timeout=900, user_index=case.user, size=case.fill)
                log(f"{layout.name}/turn: filled a session with {label(case.fill)} messages in {filled['fill_s']} s"
                    f" (settled in {filled['settle_s']} s); {filled['messages']:,} messages in the table")
            if case.platform:
                first = next(PLATFORM_UPDATES)
                done.append((case, asyncio.run(platform_case(layout.base, case.user, case.turns, model, telegram,
                                                             warmup=case.warmup))))
                stages = layout.helper("platform_stages", sender=case.user, first_update=first)
                log(f"{layout.name}/turn {case.name}: p50 of each step: " + ", ".join(f"{k} {v} ms" for k, v in stages.items()))
            elif case.alongside:
                other = next(cases)
                pair = asyncio.run(turn_pair(layout.base, (tokens[case.user], tokens[other.user]), case.turns, model,
                                             warmup=case.warmup))
                done += [(case, pair[0]), (other, pair[1])]
            else:
                users = tokens[case.user:case.user + case.users]
                done.append((case, asyncio.run(turn_case(layout.base, users, case.turns, model,
                                                         warmup=case.warmup))))
            if case.fill:
                layout.helper("chat_close", user_index=case.user)
    finally:
        layout.stop()
    rows, notes = turn_rows(layout.name, done)
    notes.append(f"{layout.name}/turn: overhead = POST → the reply's message.new on the chat's socket (for the"
                 " Telegram sender: the webhook → the reply's sendMessage at the platform), minus the"
                 f" fake model's handling of that request; the 1-user and other-rows sessions start with"
                 f" {SMALL_SESSION} messages (and grow by 2 a turn); the prompt holds the newest messages that fit"
                 " QORVEN_NUM_CTX (8192 tokens by default)")
    return rows, notes
