"""WebSockets of the live surfaces. They authenticate, join server-named groups of the one
chat their user owns, catch the client up from the database, and forward events; the
reading and writing is in channels_app.chat.

Protocol (server → client, one JSON object per frame):

- `{"type": "session", "session_id": id | null, "reset": bool}` — the session being
  watched; sent on connect and whenever the chat moves to a new session (/clear,
  compaction). `reset`: the client should drop what it shows (another session, or too far
  behind to catch up message by message) and show what follows.
- `{"type": "message.new", "seq", "role", "content", "channel", "sender_name",
  "created_at", "notice", "reply_to", "hidden", "answer_state", "delivery"?}` — each
  message once, in seq order. First the ones after the client's `last_seq` from the
  database, then live ones; a gap in the live stream (a dropped event) is filled from the
  database, so none is lost. `answer_state`: pending, answered or failed for a user
  message, null otherwise; `delivery`: `{"state": "failed", "platform"}` on a reply that
  could not be delivered to its platform.
- `{"type": "message.answer", "seq", "answer_state"}` — a user message's answer failed,
  or waits again after /retry; `{"type": "message.delivery", "seq", "delivery"}` — a
  reply's delivery failed.
- `{"type": "message.stream", "reply_to", "text"}` — the reply streamed so far (after a
  reconnect, or after a missed chunk); `{"type": "message.chunk", "reply_to", "delta",
  "offset"}` — the next piece; `{"type": "message.done", "reply_to", "seq"}`.
- `{"type": "pong"}` answers `{"type": "ping"}`; `{"type": "error", "error"}` answers a
  frame that is not a JSON document (too deep, a lone surrogate, binary).

Connect with `?session=<id>&last_seq=<n>` to resume; without them the client gets the
newest page. Authentication: the Django session cookie, or an API token as
`Authorization: Bearer <token>` or `?token=<token>` (for clients that cannot set headers).
"""
from __future__ import annotations

import logging
from collections import deque
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from qorven.runtime.publisher import chat_group, session_group
from qorven.runtime.streams import stream_snapshot
from tenancy.errors import NotFound
from tenancy.selectors import api_token_authenticate

from .chat import (
    CATCH_UP_MAX,
    PAGE,
    ChatOwner,
    chat_events,
    chat_owner,
    chat_session,
    chat_session_get,
)
from .json_body import QUERY_INT_MAX, BodyRefused, json_parse

logger = logging.getLogger(__name__)

CLOSE_REFUSED = 4403


class LiveChatConsumer(AsyncJsonWebsocketConsumer):
    """Watches one person's canonical chat with one Qor. Subclasses say who that is."""

    owner: ChatOwner | None = None

    async def authorize(self) -> ChatOwner | None:
        raise NotImplementedError

    # --- connection ---

    async def connect(self) -> None:
        self.session_id: int | None = None
        self.sent_seq = 0
        self.streams: dict[int, int] = {}  # reply_to → characters of it the client has
        self.finished: deque[int] = deque(maxlen=64)  # replies already stored and sent
        self.joined: list[str] = []
        try:
            self.owner = await self.authorize()
        except Exception:
            logger.exception("live chat authorization failed")
            self.owner = None
        if self.owner is None:
            await self.close(code=CLOSE_REFUSED)
            return
        owner = self.owner
        await self._join(chat_group(owner.tenant.pk, owner.qor.pk, owner.user.pk))
        await self.accept()
        params = self.query()
        session = await database_sync_to_async(chat_session)(owner=owner)
        resume = session is not None and _int(params.get("session")) == session.pk
        await self.watch(session, after_seq=_int(params.get("last_seq")) if resume else None)

    async def disconnect(self, code: int) -> None:
        for group in self.joined:
            await self.channel_layer.group_discard(group, self.channel_name)
        self.joined = []

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels' own dispatch hops to the one sync thread to close stale database
        # connections before every event; with hundreds of sockets on a chat that
        # serialises the whole fan-out. The handlers here reach the database only through
        # database_sync_to_async, which does that cleanup itself.
        handler = getattr(self, get_handler_name(message), None)
        if handler is not None:  # an event type this surface does not show is skipped
            await handler(message)

    @classmethod
    async def decode_json(cls, text_data: str) -> Any:
        return json_parse(text_data)  # the same checks as a request body

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        """A frame that is not a JSON document gets an error event, not a closed socket."""
        try:
            await super().receive(text_data=text_data, bytes_data=bytes_data, **kwargs)
        except BodyRefused as exc:
            await self.send_json({"type": "error", "error": f"not understood: {exc}"})
        except ValueError:  # a binary frame
            await self.send_json({"type": "error", "error": "not understood: send JSON text frames"})

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    def query(self) -> dict[str, str]:
        raw = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        return {k: v[-1] for k, v in raw.items()}

    async def _join(self, group: str) -> None:
        await self.channel_layer.group_add(group, self.channel_name)
        self.joined.append(group)

    async def _leave(self, group: str) -> None:
        await self.channel_layer.group_discard(group, self.channel_name)
        if group in self.joined:
            self.joined.remove(group)

    # --- catching up ---

    async def watch(self, session, *, after_seq: int | None) -> None:
        """Follow `session`: join its group first (so nothing falls between the database
        read and the live events), then send what the client is missing."""
        if self.session_id is not None:
            await self._leave(session_group(self.session_id))
        self.session_id = session.pk if session is not None else None
        self.sent_seq, self.streams = 0, {}
        self.finished.clear()
        if session is None:
            await self.send_json({"type": "session", "session_id": None, "reset": True})
            return
        await self._join(session_group(session.pk))
        behind = session.last_seq - (after_seq or 0)
        reset = after_seq is None or after_seq > session.last_seq or behind > CATCH_UP_MAX
        await self.send_json({"type": "session", "session_id": session.pk, "reset": reset})
        if reset:
            # The newest page; the client scrolls back for older ones.
            events = await database_sync_to_async(chat_events)(session=session, limit=PAGE)
            self.sent_seq = events[0]["seq"] - 1 if events else session.last_seq
            await self._send_events(events)
        else:
            self.sent_seq = after_seq or 0
        await self.catch_up()
        snapshot = await sync_to_async(stream_snapshot)(session.pk)
        if snapshot is not None and snapshot["reply_to"] not in self.finished:
            await self.send_json({"type": "message.stream", **snapshot})
            self.streams[snapshot["reply_to"]] = len(snapshot["text"])

    async def catch_up(self) -> None:
        """Send every stored message after the last one sent."""
        session = await database_sync_to_async(chat_session_get)(owner=self.owner, session_id=self.session_id)
        if session is None:
            return
        while True:
            events = await database_sync_to_async(chat_events)(
                session=session, after_seq=self.sent_seq, limit=CATCH_UP_MAX
            )
            await self._send_events(events)
            if len(events) < CATCH_UP_MAX:
                return

    async def _send_events(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            if event["seq"] <= self.sent_seq:
                continue
            await self.send_json(event)
            self.sent_seq = event["seq"]
            reply_to = event.get("reply_to")
            if reply_to and not event["hidden"] and event["role"] in ("assistant", "system"):
                self.streams.pop(reply_to, None)
                self.finished.append(reply_to)

    # --- live events from the channel layer ---

    async def message_new(self, event: dict[str, Any]) -> None:
        if event.get("session_id") != self.session_id:
            return
        seq = event["seq"]
        if seq <= self.sent_seq:
            return  # already sent (caught up from the database)
        if seq > self.sent_seq + 1:
            await self.catch_up()  # an event went missing: the database has it
            return
        await self._send_events([{k: v for k, v in event.items() if k != "session_id"}])

    async def message_chunk(self, event: dict[str, Any]) -> None:
        if event.get("session_id") != self.session_id:
            return
        reply_to, delta = event["reply_to"], event["delta"]
        if reply_to in self.finished:
            return
        have = self.streams.get(reply_to, 0)
        offset = event.get("offset")
        if offset is None:
            offset = have  # a producer that does not count: trust the order
        if offset + len(delta) <= have:
            return  # the snapshot already held it
        if offset > have:
            # A chunk went missing: send the whole text so far instead.
            snapshot = await sync_to_async(stream_snapshot)(self.session_id)
            if snapshot is not None and snapshot["reply_to"] == reply_to:
                await self.send_json({"type": "message.stream", **snapshot})
                self.streams[reply_to] = len(snapshot["text"])
            return
        delta = delta[have - offset:]
        await self.send_json({"type": "message.chunk", "reply_to": reply_to, "delta": delta, "offset": have})
        self.streams[reply_to] = have + len(delta)

    async def message_done(self, event: dict[str, Any]) -> None:
        if event.get("session_id") != self.session_id:
            return
        if event.get("seq", 0) > self.sent_seq:
            await self.catch_up()  # the reply itself comes first
        self.streams.pop(event["reply_to"], None)
        if event["reply_to"] not in self.finished:
            self.finished.append(event["reply_to"])
        await self.send_json({"type": "message.done", "reply_to": event["reply_to"], "seq": event.get("seq")})

    async def message_answer(self, event: dict[str, Any]) -> None:
        """A user message's answer state changed (failed, or waiting again after /retry)."""
        if event.get("session_id") != self.session_id:
            return
        if event["seq"] > self.sent_seq:
            await self.catch_up()  # the message itself, with its state as stored now
            return
        if event["answer_state"] == "pending" and event["seq"] in self.finished:
            self.finished.remove(event["seq"])  # answered again: its new reply streams
        await self.send_json({"type": "message.answer", "seq": event["seq"], "answer_state": event["answer_state"]})

    async def message_delivery(self, event: dict[str, Any]) -> None:
        """A reply could not be delivered to its platform."""
        if event.get("session_id") != self.session_id:
            return
        if event["seq"] > self.sent_seq:
            await self.catch_up()  # the reply itself, marked as stored now
            return
        await self.send_json({"type": "message.delivery", "seq": event["seq"],
                              "delivery": {"state": event["delivery"], "platform": event.get("platform", "")}})

    async def session_started(self, event: dict[str, Any]) -> None:
        if event["session_id"] == self.session_id:
            return
        session = await database_sync_to_async(chat_session_get)(owner=self.owner, session_id=event["session_id"])
        if session is not None:
            await self.watch(session, after_seq=0)


class ChatConsumer(LiveChatConsumer):
    """`/ws/chat/<tenant>/<qor>/`: the chat page (and any API client) of a member."""

    async def authorize(self) -> ChatOwner | None:
        kwargs = self.scope["url_route"]["kwargs"]
        user = self.scope.get("user")
        raw = self._bearer() or self.query().get("token", "")
        if raw:
            token = await database_sync_to_async(api_token_authenticate)(raw=raw)
            if token is None or token.tenant.slug != kwargs["tenant"]:
                return None
            user = token.user
        if user is None or not user.is_authenticated:
            return None
        try:
            return await database_sync_to_async(chat_owner)(
                user=user, tenant_slug=kwargs["tenant"], qor_slug=kwargs["qor"]
            )
        except NotFound:
            return None

    def _bearer(self) -> str:
        for name, value in self.scope.get("headers", []):
            if name == b"authorization":
                scheme, _, raw = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer":
                    return raw.strip()
        return ""


class WebchatConsumer(LiveChatConsumer):
    """`/ws/webchat/<public key>/?visitor=<token>`: a visitor of the embed on a tenant's site."""

    async def authorize(self) -> ChatOwner | None:
        from .webchat import WebchatRefused, webchat_visitor

        key = self.scope["url_route"]["kwargs"]["key"]
        token = self.query().get("visitor", "")
        if not token:
            return None
        try:
            visitor = await database_sync_to_async(webchat_visitor)(public_key=key, token=token, create=False)
        except WebchatRefused:
            return None
        return visitor.owner if visitor is not None else None


def _int(value: str | None) -> int | None:
    try:
        number = int(value) if value not in (None, "") and len(value) <= 20 else None
    except ValueError:
        return None
    return number if number is not None and 0 <= number <= QUERY_INT_MAX else None
