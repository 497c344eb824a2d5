"""Prompt windows a process holds between a session's turns.

A full window is hundreds of messages, and reading and decoding them again on every turn
was most of what a long conversation added to a turn. A turn keeps the settled part of
its window (the messages before the oldest one still waiting for an answer), with each
message's id and revision and what it costs in tokens. The session's next turn checks
those against the database in one statement that reads no text
(sessions_app.context_reads.context_versions) and reads only the messages after them (and,
if the budget has room for more, older ones — none, for a window that reached the
compaction point: its check covers the range from there). Any
difference — a message updated (its answer, a transcript, a reply written again), one
that joined or left what the model may see, a new compaction point — and the window is
read as before, so what the model is sent is always what reading it afresh gives.

Held per process (the embedded worker's turns run on threads: a lock), for the sessions
that talked last, up to MAX_HELD_MESSAGES messages in all.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from sessions_app.selectors import MessageRow

MAX_HELD_MESSAGES = 50_000  # a 640-message window is ~200 KB; this bounds a process to ~15 MB


@dataclass(frozen=True)
class Held:
    floor: int  # the session's compaction point when the rows were read
    rows: tuple[MessageRow, ...]  # oldest first
    costs: tuple[int, ...]  # each row's tokens (qorven.agent.prompt.message_tokens)
    # The rows are all a context read returned down to the compaction point: nothing older
    # was left out. Checked as a range from the compaction point, such a window needs no
    # read of older messages when the budget takes it all (a short conversation's turn).
    from_floor: bool = False
    versions: list[tuple[int, int | None]] = field(init=False)  # each row's (id, revision)
    # The request's dict made of a row (qorven.agent.prompt.to_openai) by its id, revision
    # and the trust of the message answered; filled as a prompt is built, and carried to the
    # session's next held window for the rows both hold.
    rendered: dict[tuple[int, int | None, str, str | None], dict[str, Any]] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "versions", [(row.id, row.revision) for row in self.rows])


_held: OrderedDict[int, Held] = OrderedDict()
_lock = threading.Lock()
_count = 0  # messages held, over all sessions


def held_window(session_id: int) -> Held | None:
    """What this process holds of the session's last window, to be checked before use."""
    with _lock:
        held = _held.get(session_id)
        if held is not None:
            _held.move_to_end(session_id)
        return held


def held_window_keep(session_id: int, held: Held | None) -> None:
    """Hold `held` as the session's window (None: hold nothing for it)."""
    global _count
    with _lock:
        old = _held.pop(session_id, None)
        if old is not None:
            _count -= len(old.rows)
        if held is None or not held.rows or len(held.rows) > MAX_HELD_MESSAGES:
            return
        _held[session_id] = held
        _count += len(held.rows)
        while _count > MAX_HELD_MESSAGES:
            _, dropped = _held.popitem(last=False)
            _count -= len(dropped.rows)


def held_windows_clear() -> None:
    """Hold nothing (a test starting on a fresh database)."""
    global _count
    with _lock:
        _held.clear()
        _count = 0
