"""bench/e2e.py's fan-out phase: live events to 200 sockets of one chat and of 200 chats."""
from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _common import Row, log
from _servers import (
    free_port,
    pct,
    spawn,
    stop,
    wait_http,
)

# --- 2. fan-out ---------------------------------------------------------------------------------------
from _e2e.clients import Watchers, client_session, post_json
from _e2e.common import (
    BENCH_DIR,
    CLIENTS,
    Layout,
    POST_AT_ONCE,
    QOR,
    Sizes,
    TENANT,
    WAIT,
    figure,
    nonce,
    nonce_of,
)


async def one_chat(watchers: Watchers, post: Callable[[str], Awaitable[None]], messages: int,
                   clients: int, replies: bool) -> list[str]:
    """Post `messages` one at a time, each waiting until every client has it (and, with
    `replies`, the reply); return the keys that did not reach every client."""
    missed = []
    for i in range(messages + 1):  # the first is a warm-up
        key = nonce()
        watchers.expect(key)
        await post(f"fan-out {i} [{key}]")
        if not await watchers.until(lambda: watchers.got(key) >= clients, WAIT):
            missed.append(key)
        if replies:
            await watchers.until(lambda: watchers.replies[key] >= clients, WAIT)
        await asyncio.sleep(0.05)
        if i == 0:
            watchers.latency_ms.pop(key)
    return missed


async def many_chats(watchers: Watchers, post: Callable[[int, str], Awaitable[None]],
                     chats: int) -> tuple[list[str], list[str]]:
    """Post one message in each chat, POST_AT_ONCE at a time; wait for every delivery.
    Returns (the keys, the keys missed)."""
    keys = [nonce() for _ in range(chats)]
    for key in keys:
        watchers.expect(key)
    gate = asyncio.Semaphore(POST_AT_ONCE)

    async def one(i: int) -> None:
        async with gate:
            await post(i, f"chat {i} [{keys[i]}]")

    await asyncio.gather(*(one(i) for i in range(chats)))
    await watchers.until(lambda: all(watchers.got(k) for k in keys), 2 * WAIT)
    return keys, [k for k in keys if not watchers.got(k)]


def deliveries(watchers: Watchers, keys: list[str] | None = None) -> list[float]:
    return [ms for key, values in watchers.latency_ms.items() if keys is None or key in keys for ms in values]


async def fanout_qorven(base: str, tokens: dict[str, Any], sizes: Sizes,
                        publish: Callable[[list[int], list[str]], Any] | None) -> dict[str, Any]:
    """The through-the-API cases; with `publish` (a layer other processes reach), each
    also once published by another process: the fan-out alone ("alone_one", "alone_many")."""
    ws_base = base.replace("http://", "ws://") + f"/ws/chat/{TENANT}/{QOR}/?token="
    api = f"{base}/v1/qors/{QOR}/messages"
    out: dict[str, Any] = {}
    async with client_session() as http:
        watchers = Watchers()
        try:
            started = time.monotonic()
            await watchers.connect([ws_base + tokens["owner"]] * CLIENTS, base)
            log(f"fan-out: {CLIENTS} sockets on one chat connected in {time.monotonic() - started:.1f} s")
            started = time.monotonic()
            missed = await one_chat(watchers, lambda text: post_json(http, api, {"content": text}, tokens["owner"]),
                                    sizes.fanout_messages, CLIENTS, replies=True)
            out["one"], out["one_missed"] = deliveries(watchers), len(missed)
            log(f"fan-out: {sizes.fanout_messages + 1} messages on one chat in {time.monotonic() - started:.1f} s")
            if publish is not None:
                before = set(watchers.latency_ms)
                missed = await one_chat(watchers, lambda text: asyncio.to_thread(publish, [-1], [nonce_of(text)]),
                                        sizes.fanout_messages, CLIENTS, replies=False)
                alone = [k for k in watchers.latency_ms if k not in before]
                out["alone_one"], out["alone_one_missed"] = deliveries(watchers, alone), len(missed)
        finally:
            await watchers.close()
        watchers = Watchers()
        try:
            started = time.monotonic()
            await watchers.connect([ws_base + t for t in tokens["users"][:CLIENTS]], base)
            log(f"fan-out: {CLIENTS} sockets on {CLIENTS} chats connected in {time.monotonic() - started:.1f} s")
            started = time.monotonic()

            async def post(i: int, text: str) -> None:
                await post_json(http, api, {"content": text}, tokens["users"][i])

            # Not waiting for the replies: the turns still running are stopped with the server.
            keys, missed = await many_chats(watchers, post, CLIENTS)
            out["many"], out["many_missed"] = deliveries(watchers, keys), len(missed)
            log(f"fan-out: a message in each of {CLIENTS} chats, delivered, in {time.monotonic() - started:.1f} s"
                f" ({sum(1 for k in keys if watchers.replies[k])} answered by then)")
            if publish is not None:
                # Once every turn has answered (a reply still to come would take the seq a
                # socket expects next, and send it to the database to catch up), the same
                # again from another process, POST_AT_ONCE chats at a time as the POSTs were.
                await watchers.until(lambda: all(watchers.replies[k] for k in keys), 2 * WAIT)
                alone = [nonce() for _ in range(CLIENTS)]
                for key in alone:
                    watchers.expect(key)
                for first in range(0, CLIENTS, POST_AT_ONCE):
                    batch = alone[first:first + POST_AT_ONCE]
                    await asyncio.to_thread(publish, list(range(first, first + len(batch))), batch)
                    await watchers.until(lambda: all(watchers.got(k) for k in batch), WAIT)
                out["alone_many"] = deliveries(watchers, alone)
                out["alone_many_missed"] = sum(1 for k in alone if not watchers.got(k))
        finally:
            await watchers.close()
    return out


async def fanout_baseline(base: str, sizes: Sizes) -> dict[str, Any]:
    ws_base = base.replace("http://", "ws://") + "/ws?chat="
    out: dict[str, Any] = {}
    async with client_session() as http:

        async def send(chat: int, text: str) -> None:
            await post_json(http, f"{base}/send?chat={chat}", {"type": "message.new", "role": "user", "content": text})

        watchers = Watchers()
        try:
            await watchers.connect([ws_base + "0"] * CLIENTS, None)
            missed = await one_chat(watchers, lambda text: send(0, text), sizes.fanout_messages, CLIENTS,
                                    replies=False)
            out["one"], out["one_missed"] = deliveries(watchers), len(missed)
        finally:
            await watchers.close()
        watchers = Watchers()
        try:
            await watchers.connect([ws_base + str(i) for i in range(CLIENTS)], None)
            keys, missed = await many_chats(watchers, send, CLIENTS)
            out["many"], out["many_missed"] = deliveries(watchers, keys), len(missed)
        finally:
            await watchers.close()
    return out


def broadcast_baseline(tmp: Path, env: dict[str, str], sizes: Sizes) -> dict[str, Any]:
    port = free_port()
    proc = spawn([sys.executable, str(BENCH_DIR / "_broadcast.py"), str(port)], env, tmp / "broadcast.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/health", [proc], 30, "the broadcast server")
        return asyncio.run(fanout_baseline(f"http://127.0.0.1:{port}", sizes))
    finally:
        stop(proc)


def fanout(layout: Layout, sizes: Sizes) -> tuple[list[Row], list[str]]:
    base = broadcast_baseline(layout.tmp, layout.env, sizes)
    layout.start("fanout")
    # On the in-process layer only the server itself can publish: no "alone" case there.
    publish = None if layout.name == "embedded" else (lambda users, keys: layout.helper("publish_alone", users=users,
                                                                                          keys=keys))
    try:
        measured = asyncio.run(fanout_qorven(layout.base, layout.tokens, sizes, publish))
    finally:
        layout.stop()
    rows: list[Row] = []
    notes: list[str] = []
    expected = {"one": sizes.fanout_messages * CLIENTS, "many": CLIENTS,
                "alone_one": sizes.fanout_messages * CLIENTS, "alone_many": CLIENTS}
    cases = [("one", "one", f"{CLIENTS} sockets on 1 chat"), ("many", "many", f"{CLIENTS} sockets on {CLIENTS} chats")]
    if publish is not None:
        cases += [("alone_one", "one", f"{CLIENTS} sockets on 1 chat, published by another process"),
                  ("alone_many", "many", f"{CLIENTS} sockets on {CLIENTS} chats, published by another process")]
    for case, base_case, what in cases:
        got = measured[case]
        if not got:
            notes.append(f"{layout.name}/fan-out {what}: no delivery at all")
            continue
        (p50, p99), (b50, b99) = pct(got, 2), pct(base[base_case], 2)
        complete = len(got) == expected[case]
        for name, value, b, limit in (("p50", p50, b50, 10), ("p99", p99, b99, 50)):
            rows.append(figure(layout.name, f"fan-out: {what}, {name}", value, unit="ms", baseline=b,
                               goal=f"≤ {limit} ms, ≤ 2× base",
                               ok=complete and value <= limit and (not b or value / b <= 2)))
        log(f"{layout.name}/fan-out {what}: p50 {p50} ms, p99 {p99} ms over {len(got)}/{expected[case]} deliveries"
            f" (base p50 {b50} ms, p99 {b99} ms)")
        if not complete:
            notes.append(f"{layout.name}/fan-out {what}: {len(got)}/{expected[case]} deliveries within {WAIT:.0f} s")
    notes.append(f"{layout.name}/fan-out: one chat: {sizes.fanout_messages} messages one at a time, each"
                 f" answered (the reply reaches the {CLIENTS} sockets too) before the next; {CLIENTS} chats: one"
                 f" message each, {POST_AT_ONCE} POSTs at a time, their turns running meanwhile (the phase ends"
                 " when every message is delivered); measured from the message's created_at, stamped before"
                 " its INSERT")
    if publish is not None:
        notes.append(f"{layout.name}/fan-out published by another process: the same sockets, messages stored"
                     " without their live event, then the event published by the bench's Django process"
                     " (as a worker publishes) and measured from that moment: the layer, the server's hub and"
                     f" the sockets alone, {POST_AT_ONCE} chats at a time, no turns")
    return rows, notes
