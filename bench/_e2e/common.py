"""Constants, sizes and the figures' shape shared by bench/e2e.py's phases."""
from __future__ import annotations

import itertools
import re
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from _common import Row, met
from _servers import (
    Helper,
    Servers,
)

T = TypeVar("T")

DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/qorven_bench_e2e"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/6"
LAYOUTS = ("embedded", "postgres+redis")
PHASES = ("ingest", "fanout", "turn")
TENANT, QOR, OWNER = "acme", "aria", "alice"
TG_SECRET, TG_BASE_ID = "bench-e2e-secret", 700_000  # sender i is Telegram user TG_BASE_ID + i
SENDERS, CLIENTS, CONCURRENCY, POST_AT_ONCE = 500, 200, 50, 10
# Users u0000…: the first SENDERS are paired Telegram senders (and the first CLIENTS of
# them the 200 chats of the fan-out); then the turn cases' users.
SEQ_USER, CONCURRENT_FIRST, CONCURRENT_USERS = SENDERS, SENDERS + 1, 50
MID_USER, BIG_USER, OTHER_USER = (CONCURRENT_FIRST + CONCURRENT_USERS + i for i in range(3))
USERS = OTHER_USER + 1
SMALL_SESSION = 10  # messages stored in a turn user's session before it starts
NONCE = re.compile(r"\[(n[0-9a-f]{12})\]")
PLATFORM_SENDER = SENDERS - 1  # the paired sender of the Telegram turns (its ingest backlog is closed first)
PLATFORM_UPDATES = itertools.count(3_000_000)  # update ids no ingest delivery uses
WAIT = 30.0  # at most this long for one message (to every client), one reply
CASE_DEADLINE = 180.0  # a turn case stops sending after this long
DAPHNE = Path(sys.executable).with_name("daphne")
BENCH_DIR = Path(__file__).resolve().parent.parent  # bench/


@dataclass(frozen=True)
class Sizes:
    deliveries: int
    fanout_messages: int
    turns: int
    turns_each: int
    mid: int  # enough to fill the prompt's budget (QORVEN_NUM_CTX, 8192 tokens by default)
    big: int
    processing_timeout: float  # seconds for every ingested message to be answered and its reply sent


FULL = Sizes(deliveries=5_000, fanout_messages=20, turns=50, turns_each=4, mid=10_000, big=1_000_000,
             processing_timeout=180.0)
QUICK = Sizes(deliveries=300, fanout_messages=3, turns=10, turns_each=1, mid=2_000, big=10_000,
              processing_timeout=30.0)


def nonce() -> str:
    return f"n{uuid.uuid4().hex[:12]}"


def nonce_of(text: str) -> str:
    found = NONCE.search(text)
    assert found is not None, text
    return found.group(1)


def figure(layout: str, name: str, measured: float | int | None, *, baseline: float | None = None,
           goal: str = "", ok: bool | None = None, unit: str = "") -> Row:
    """One row of the table (the unit, if any, in the figure's name); `ok` None: reported, not a goal."""
    ratio = round(measured / baseline, 2) if measured is not None and baseline else None
    return {"layout": layout, "figure": f"{name} ({unit})" if unit else name, "measured": measured, "baseline": baseline,
            "ratio": ratio, "goal": goal or "reported", "met": met(ok) if ok is not None else "—"}


# --- one layout ---------------------------------------------------------------------------------------


class Layout(Servers):
    """One layout's processes (_servers.Servers), its database helper and the tokens."""

    def __init__(self, name: str, env: dict[str, str], tmp: Path, worker: bool, redis_url: str | None) -> None:
        super().__init__(name, env, tmp, worker, redis_url)
        self.helper: Helper | None = None
        self.tokens: dict[str, Any] = {}

    def start(self, label: str) -> None:
        self.helper("leftovers_clear")  # what the last phase's stopped processes left behind
        super().start(label)
