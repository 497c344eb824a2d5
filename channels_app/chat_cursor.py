"""Where one client following a chat has got to, with no I/O: the session it watches, the
last message it was sent, how much of each streaming reply it has, which replies are
finished. It is fed live events from the layer and stored messages from the database and
says what to send and what to read — the WebSocket consumer and the terminal client both
drive it, so the protocol's rules are written once (see channels_app.consumers for the
frames).

The rules: every message is sent once, in seq order; a live message after a gap, or a
state change for a message not sent yet, means the database is read first (the layer can
drop events); a chunk after a missing one is replaced by the reply's text so far; a reply
already stored is never streamed again, until /retry makes its message wait again.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

FINISHED_KEPT = 64  # replies remembered as finished: enough for any chunk still in flight
_ROUTING = frozenset({"session_id", "group", "local_to"})  # how an event found its way, not part of the message


@dataclass
class Step:
    """What to do for one live event, in this order: `follow` a new session (load it and
    `watch` it), or `catch_up` (read the stored messages after `sent_seq` and feed them to
    `rows`), then send `frames`; with `snapshot`, read that reply's text so far and feed it
    to `stream`."""

    frames: list[dict[str, Any]] = field(default_factory=list)
    catch_up: bool = False
    snapshot: int | None = None
    follow: int | None = None


class ChatCursor:
    """One client's place in one chat. `deltas`: the client cannot replace text it has
    shown (a terminal), so a reply's text so far comes as the chunk it is missing rather
    than as a `message.stream` frame."""

    def __init__(self, *, deltas: bool = False) -> None:
        self.deltas = deltas
        self.session_id: int | None = None
        self.sent_seq = 0
        # reply_to → the text of it the client has: its length is where the next chunk
        # goes, and text that no longer matches it is a reply that started afresh (its
        # restart lost on the way).
        self.texts: dict[int, str] = {}
        self.finished: deque[int] = deque(maxlen=FINISHED_KEPT)

    def watch(self, session_id: int | None, *, sent_seq: int) -> None:
        """Follow `session_id` from scratch; the client has everything up to `sent_seq`."""
        self.session_id, self.sent_seq = session_id, sent_seq
        self.texts = {}
        self.finished.clear()

    def rows(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The `message.new` frames of stored messages (or in-order live ones) the client
        does not have yet. A reply among them ends its stream; `streamed` says whether the
        client was shown its text as it streamed."""
        frames = []
        for event in events:
            if event["seq"] <= self.sent_seq:
                continue
            self.sent_seq = event["seq"]
            frame = {k: v for k, v in event.items() if k not in _ROUTING}
            reply_to = frame.get("reply_to")
            if reply_to and not frame.get("hidden") and frame.get("role") in ("assistant", "system"):
                held = self.texts.pop(reply_to, "")
                frame["streamed"] = bool(held)
                if held and self.deltas:
                    frames.extend(self._stream_close(frame, held))
                self._finish(reply_to)
            frames.append(frame)
        return frames

    def _stream_close(self, frame: dict[str, Any], held: str) -> list[dict[str, Any]]:
        """For a client that cannot replace what it has shown: what makes its streamed text
        the stored reply's. The row can come from the database before the last of the live
        events (a catch-up read while they are on their way), which are then dropped as
        late: the chunks still missing come first, and text that was not the reply (a
        thinking model's reasoning, its restart not yet arrived) is taken back, the row
        then shown whole (`streamed` false). A notice of ours after part of a reply is
        shown whole after it."""
        reply_to, content = frame["reply_to"], str(frame.get("content") or "")
        if content.startswith(held):
            rest = content[len(held):]
            return [{"type": "message.chunk", "reply_to": reply_to, "delta": rest, "offset": len(held)}] if rest else []
        if held.startswith(content.rstrip()):
            return []  # what was shown is the reply (a stopped reply's stored text ends sooner)
        frame["streamed"] = False
        if frame["role"] == "assistant":
            return [{"type": "message.stream", "reply_to": reply_to, "text": ""}]
        return []

    def stream(self, snapshot: dict[str, Any] | None, *, reply_to: int | None = None) -> list[dict[str, Any]]:
        """The frame for a reply's text so far (`snapshot`: {"reply_to", "text"}), if it is
        still streaming and, with `reply_to`, the one asked for."""
        if snapshot is None or snapshot["reply_to"] in self.finished:
            return []
        if reply_to is not None and snapshot["reply_to"] != reply_to:
            return []
        reply, text = snapshot["reply_to"], snapshot["text"]
        held = self.texts.get(reply, "")
        self.texts[reply] = text
        if not self.deltas:
            return [{"type": "message.stream", "reply_to": reply, "text": text}]
        if not text.startswith(held):  # the reply started afresh: what the client shows is not it
            afresh = [{"type": "message.stream", "reply_to": reply, "text": ""}]
            return afresh + ([{"type": "message.chunk", "reply_to": reply, "delta": text, "offset": 0}] if text else [])
        if len(text) <= len(held):
            return []
        return [{"type": "message.chunk", "reply_to": reply, "delta": text[len(held):], "offset": len(held)}]

    def live(self, event: dict[str, Any]) -> Step:
        """What one event from the layer means for this client."""
        kind = event.get("type")
        if kind == "session.started":
            return Step(follow=event["session_id"]) if event["session_id"] != self.session_id else Step()
        if event.get("session_id") != self.session_id:
            return Step()
        if kind == "message.new":
            if event["seq"] <= self.sent_seq:
                return Step()  # already sent (caught up from the database)
            if event["seq"] > self.sent_seq + 1:
                return Step(catch_up=True)  # an event went missing: the database has it
            return Step(frames=self.rows([event]))
        if kind == "message.chunk":
            return self._chunk(event)
        if kind == "message.restart":  # what streamed was not the answer: the reply starts afresh
            reply_to = event["reply_to"]
            if reply_to in self.finished:
                return Step()
            self.texts[reply_to] = ""
            return Step(frames=[{"type": "message.stream", "reply_to": reply_to, "text": ""}])
        if kind == "message.done":
            reply_to = event["reply_to"]
            behind = event.get("seq", 0) > self.sent_seq  # the reply itself comes first
            self.texts.pop(reply_to, None)
            self._finish(reply_to)
            return Step(frames=[{"type": "message.done", "reply_to": reply_to, "seq": event.get("seq")}],
                        catch_up=behind)
        if kind == "message.answer":
            if event["seq"] > self.sent_seq:
                return Step(catch_up=True)  # the message itself, with its state as stored now
            if event["answer_state"] == "pending" and event["seq"] in self.finished:
                self.finished.remove(event["seq"])  # answered again: its new reply streams
            return Step(frames=[{"type": "message.answer", "seq": event["seq"],
                                 "answer_state": event["answer_state"]}])
        if kind == "message.regenerating":
            if event["reply_to"] > self.sent_seq:
                return Step(catch_up=True)
            if event["reply_to"] in self.finished:
                self.finished.remove(event["reply_to"])  # its new answer streams
            return Step(frames=[{"type": "message.regenerating", "reply_to": event["reply_to"],
                                 "superseded": event["superseded"]}])
        if kind == "message.transcribed":
            if event["seq"] > self.sent_seq:
                return Step(catch_up=True)  # the message itself, with its transcript as stored now
            return Step(frames=[{"type": "message.transcribed", "seq": event["seq"], "content": event["content"],
                                 "voice": event.get("voice", "")}])
        if kind == "message.delivery":
            if event["seq"] > self.sent_seq:
                return Step(catch_up=True)  # the reply itself, marked as stored now
            return Step(frames=[{"type": "message.delivery", "seq": event["seq"],
                                 "delivery": {"state": event["delivery"], "platform": event.get("platform", "")}}])
        return Step()  # an event type clients are not shown

    def _chunk(self, event: dict[str, Any]) -> Step:
        reply_to, delta = event["reply_to"], event["delta"]
        if reply_to in self.finished:
            return Step()
        frames = []
        if event.get("restart") and self.texts.get(reply_to):
            # The first chunk of a new try: what the client holds is a dead try's text
            # (its worker died mid-reply), not the start of this one. Start afresh.
            self.texts[reply_to] = ""
            frames.append({"type": "message.stream", "reply_to": reply_to, "text": ""})
        held = self.texts.get(reply_to, "")
        have = len(held)
        offset = event.get("offset")
        if offset is None:
            offset = have  # a producer that does not count: trust the order
        if offset > have:
            return Step(frames=frames, snapshot=reply_to)  # a chunk went missing: the text so far instead
        if held[offset:offset + len(delta)] != delta[:have - offset]:
            # Not the text the client holds: the reply started afresh and its restart
            # was lost on the way. The text so far, instead, shows it from its start.
            return Step(frames=frames, snapshot=reply_to)
        if offset + len(delta) <= have:
            return Step()  # the snapshot already held it
        delta = delta[have - offset:]
        self.texts[reply_to] = held + delta
        return Step(frames=[*frames, {"type": "message.chunk", "reply_to": reply_to, "delta": delta, "offset": have}])

    def _finish(self, reply_to: int) -> None:
        if reply_to not in self.finished:
            self.finished.append(reply_to)
