"""The terminal's follower (channels_app.terminal): one ordered stream of a chat's
messages, from the channel layer's events and from reading the database by seq."""
from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from django.db import close_old_connections

from qorven.runtime.pubsub_layer import joins_heard
from qorven.runtime.publisher import chat_group, session_group
from qorven.runtime.streams import stream_snapshot

from .chat import CATCH_UP_MAX, ChatOwner, chat_events, chat_session, chat_session_get
from .chat_cursor import ChatCursor

Emit = Callable[[dict[str, Any]], None]


@dataclass
class Follower:
    """Turns channel-layer events and database reads into one ordered stream of
    `message`, `notice`, `chunk`, `done` and `session` outputs (see `emit`)."""

    owner: ChatOwner
    emit: Emit
    poll_every: float = 1.0
    # The protocol's state and rules, shared with the WebSocket consumer.
    cursor: ChatCursor = field(default_factory=lambda: ChatCursor(deltas=True))
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _layer: Any = None
    _loop: asyncio.AbstractEventLoop | None = None
    _channel: str | None = None
    _joined: str | None = None  # the session group the channel is in
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ended: set[int] = field(default_factory=set)  # the messages whose reply's "done" was emitted
    signed_out: threading.Event = field(default_factory=threading.Event)  # a server refuses this terminal now

    @property
    def session_id(self) -> int | None:
        return self.cursor.session_id

    def start(self, *, history: int) -> None:
        session = chat_session(owner=self.owner)
        if session is not None:
            # `history` messages shown: the Qor's working (never shown) takes no place.
            events = chat_events(session=session, limit=history, without_working=True) if history else []
            self.cursor.watch(session.pk, sent_seq=events[0]["seq"] - 1 if events else session.last_seq)
            self._show(self.cursor.rows(events), history=True)
            self.catch_up()
        self._subscribe()
        self._thread = threading.Thread(target=self._run, name="qorven-chat-follow", daemon=True)
        self._thread.start()

    def _subscribe(self) -> None:
        """Join the chat's groups before start() returns: a message sent right after it
        (its reply streaming at once on this process's worker) is followed from its first
        chunk. The thread then runs the loop these were made on."""
        from channels.layers import get_channel_layer

        self._layer = get_channel_layer()
        self._loop = asyncio.new_event_loop()
        self._channel = None
        self._joined = None
        self._receiving, self._early = None, []
        if self._layer is None:
            return
        self._channel = self._loop.run_until_complete(self._layer.new_channel())
        groups = [chat_group(self.owner.tenant.pk, self.owner.qor.pk, self.owner.user.pk)]
        self._joined = self._group()
        if self._joined:
            groups.append(self._joined)
        for group in groups:
            self._loop.run_until_complete(self._layer.group_add(group, self._channel))
        # On the pub/sub layer a join is live only once Redis has taken it.
        self._receiving, self._early = self._loop.run_until_complete(
            joins_heard(self._layer, self._channel, groups))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    # --- the follower thread ---

    def _run(self) -> None:
        layer, loop, channel, joined = self._layer, self._loop, self._channel, self._joined
        # One receive outstanding at a time, never cancelled while we follow: the Redis
        # pub/sub layer drops a channel whose receive is cancelled (and events with it).
        receiving: asyncio.Task | None = self._receiving
        last_poll = 0.0
        try:
            self._handle_all(self._early)  # read while making sure of the joins
            while not self._stop.is_set():
                if channel is not None and joined != self._group():
                    if joined:
                        loop.run_until_complete(layer.group_discard(joined, channel))
                    joined = self._group()
                    if joined:
                        loop.run_until_complete(layer.group_add(joined, channel))
                        receiving, early = loop.run_until_complete(joins_heard(layer, channel, [joined], receiving))
                        self._handle_all(early)
                event = None
                if channel is not None:
                    if receiving is None:
                        receiving = loop.create_task(layer.receive(channel))
                    event = loop.run_until_complete(_next_event(receiving, 0.25))
                    if event is not None:
                        receiving = None
                if event is None and channel is None:
                    time.sleep(0.25)
                with self._lock:
                    if event is not None:
                        self.handle(event)
                    if time.monotonic() - last_poll >= self.poll_every:
                        last_poll = time.monotonic()
                        self.catch_up()
        finally:
            if receiving is not None:
                receiving.cancel()
                loop.run_until_complete(asyncio.gather(receiving, return_exceptions=True))
            close_old_connections()
            loop.close()

    def _group(self) -> str | None:
        return session_group(self.session_id) if self.session_id is not None else None

    # --- events ---

    def _handle_all(self, events: list[dict[str, Any]]) -> None:
        with self._lock:
            for event in events:
                self.handle(event)

    def handle(self, event: dict[str, Any]) -> None:
        """Do what the cursor says an event means (channels_app.chat_cursor)."""
        step = self.cursor.live(event)
        if step.follow is not None:
            self._follow(step.follow)
            return
        if step.catch_up:
            self.catch_up()
        self._show(step.frames)
        if step.snapshot is not None and self.session_id is not None:
            self._show(self.cursor.stream(stream_snapshot(self.session_id), reply_to=step.snapshot))

    def _follow(self, session_id: int) -> None:
        if session_id == self.session_id:
            return
        session = chat_session_get(owner=self.owner, session_id=session_id)
        if session is None:
            return
        moved = self.session_id is not None
        self.cursor.watch(session.pk, sent_seq=0)
        if moved:  # /clear or a compaction: a new conversation starts here
            self.emit({"type": "session", "session_id": session.pk})
        self.catch_up()

    def catch_up(self) -> None:
        """Everything stored after the last message shown (also notices a new session)."""
        try:
            session = chat_session(owner=self.owner)
            if session is not None and session.pk != self.session_id:
                self._follow(session.pk)
                return
            if session is None or session.last_seq <= self.cursor.sent_seq:
                return
            while True:
                events = chat_events(session=session, after_seq=self.cursor.sent_seq, limit=CATCH_UP_MAX)
                self._show(self.cursor.rows(events))
                if len(events) < CATCH_UP_MAX:
                    return
        finally:
            close_old_connections()

    def _show(self, frames: list[dict[str, Any]], *, history: bool = False) -> None:
        """The cursor's frames as this client's outputs: messages (not the Qor's hidden
        working), chunks and ends of replies. Every reply ends with one "done", also one
        read back from the database (the socket connected after it was written, or it
        came without streaming): only a streamed reply's live end says so itself. Replies
        shown as history get none."""
        for frame in frames:
            kind = frame["type"]
            if kind == "message.new" and not frame["hidden"]:
                self.emit(frame)
                reply_to = frame.get("reply_to")
                if frame["role"] in ("assistant", "system") and reply_to is not None:
                    self._end(reply_to, frame["seq"], quiet=history)
            elif kind == "message.chunk":
                self.emit({"type": "chunk", "reply_to": frame["reply_to"], "delta": frame["delta"]})
            elif kind == "message.stream":  # to a cursor of deltas, only a reply starting afresh
                self.emit({"type": "restart", "reply_to": frame["reply_to"]})
            elif kind == "message.done":
                self._end(frame["reply_to"], frame["seq"])

    def _end(self, reply_to: int, seq: int, *, quiet: bool = False) -> None:
        if reply_to in self._ended:
            return
        self._ended.add(reply_to)
        if not quiet:
            self.emit({"type": "done", "reply_to": reply_to, "seq": seq})


async def _next_event(receiving: asyncio.Task, timeout: float) -> dict[str, Any] | None:
    """The event `receiving` got, or None if it has none within `timeout` (it goes on)."""
    done, _ = await asyncio.wait({receiving}, timeout=timeout)
    return receiving.result() if done else None


# --- output ---
