"""WebSockets of the live surfaces. They authenticate, join server-named groups of the one
chat their user owns, catch the client up from the database, and forward events; the
reading and writing is in channels_app.chat.

Protocol (server → client, one JSON object per frame):

- `{"type": "session", "session_id": id | null, "reset": bool}` — the session being
  watched; sent on connect and whenever the chat moves to a new session (/clear,
  compaction). `reset`: the client should drop what it shows (another session, or too far
  behind to catch up message by message) and show what follows.
- `{"type": "message.new", "seq", "role", "content", "channel", "sender_name",
  "created_at", "notice", "reply_to", "hidden", "answer_state", "delivery"?, "streamed"?}` — each
  message once, in seq order. First the ones after the client's `last_seq` from the
  database, then live ones; a gap in the live stream (a dropped event) is filled from the
  database, so none is lost. `answer_state`: pending, answered or failed for a user
  message, null otherwise; `delivery`: `{"state": "failed", "platform"}` on a reply that
  could not be delivered to its platform; `streamed` on a reply: whether this client was
  shown its text as it streamed.
- `{"type": "message.answer", "seq", "answer_state"}` — a user message's answer failed,
  or waits again after /retry; `{"type": "message.delivery", "seq", "delivery"}` — a
  reply's delivery failed; `{"type": "message.transcribed", "seq", "content", "voice"}` — a
  voice note was heard (`voice`: transcript) or could not be (failed): `content` is its
  text now; `{"type": "message.regenerating", "reply_to", "superseded"}` —
  the answer to `reply_to` is being written again: the replies at the `superseded` seqs
  are no longer shown (a reload sends them `hidden`).
- `{"type": "message.stream", "reply_to", "text"}` — the reply streamed so far (after a
  reconnect, or after a missed chunk); `{"type": "message.chunk", "reply_to", "delta",
  "offset"}` — the next piece; `{"type": "message.done", "reply_to", "seq"}`.
- `{"type": "pong"}` answers `{"type": "ping"}`; `{"type": "error", "error"}` answers a
  frame that is not a JSON document (too deep, a lone surrogate, binary).
- `{"type": "signed_out"}`, then a close with code 4401: the sign-in behind the socket
  ended (sign-out in another tab, a password change, a revoked token, removal from the
  tenant; see channels_app.live_auth). The client should ask the person to sign in again
  rather than reconnect.

Connect with `?session=<id>&last_seq=<n>` to resume; without them the client gets the
newest page. Authentication: the Django session cookie, or an API token as
`Authorization: Bearer <token>` or `?token=<token>` (for clients that cannot set headers).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from qorven.runtime import metrics
from qorven.runtime.hub import Encoder, hub
from qorven.runtime.publisher import chat_group, session_group
from qorven.runtime.streams import stream_snapshot
from sessions_app.channel_kinds import Channel
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
from .chat_cursor import ChatCursor, Step
from .json_body import QUERY_INT_MAX, BodyRefused, json_parse
from .live_auth import (
    RECHECK_DELAY,
    RECHECK_EVERY,
    auth_group,
    session_fingerprint,
    socket_signed_in,
    webchat_auth_group,
)

logger = logging.getLogger(__name__)

CLOSE_REFUSED = 4403
# The ASGI server's send, put in the scope by the outermost middleware (qorven.asgi).
RAW_SEND = "qorven.raw_send"
CLOSE_SIGNED_OUT = 4401
# What the layer carries to a chat's sockets; each goes through the chat cursor.
LIVE_EVENTS = frozenset({"message.new", "message.chunk", "message.restart", "message.done", "message.answer",
                         "message.delivery",
                         "message.regenerating", "message.transcribed", "session.started"})


class LiveChatConsumer(AsyncJsonWebsocketConsumer):
    """Watches one person's canonical chat with one Qor. Subclasses say who that is."""

    owner: ChatOwner | None = None

    async def authorize(self) -> ChatOwner | None:
        raise NotImplementedError

    # --- connection ---

    async def connect(self) -> None:
        self.cursor = ChatCursor()
        self.joined: list[str] = []
        # Events that wait for the socket's own work in progress (connecting, a catch-up
        # from the database), in order; None while there is none.
        self.backlog: deque[tuple[str, Any]] | None = deque()
        self.draining: asyncio.Task[None] | None = None
        self.checked_at = time.monotonic()
        self.rechecks: set[asyncio.Task[None]] = set()
        try:
            await self._connect()
        finally:
            if self.backlog and self.owner is not None:  # what arrived meanwhile, after what was read
                self.draining = asyncio.get_running_loop().create_task(self._drain())
            else:
                self.backlog = None

    async def _connect(self) -> None:
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
        if self.follows_sign_in:
            for group in (auth_group(owner.user.pk), *self.more_auth_groups(owner)):
                await self._join(group)
        await self.accept()
        metrics.live_sockets.inc()
        self.counted = True
        params = self.query()
        session = await database_sync_to_async(chat_session)(owner=owner)
        resume = session is not None and _int(params.get("session")) == session.pk
        await self.watch(session, after_seq=_int(params.get("last_seq")) if resume else None)

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            # A send to a client already gone (the catch-up page, a pong) raises out of
            # its handler (uvicorn's ClientDisconnected) and ends the consumer without
            # websocket.disconnect's handler: the socket stayed subscribed to the hub, was
            # handed every event of its chat and counted open, for the life of the server.
            await self._let_go()

    async def disconnect(self, code: int) -> None:
        await self._let_go()

    async def _let_go(self) -> None:
        """Leave the hub and the count of open sockets, and stop the socket's tasks (once)."""
        for task in [*getattr(self, "rechecks", ()), getattr(self, "draining", None)]:
            if task is not None:
                task.cancel()
        if getattr(self, "counted", False):
            metrics.live_sockets.dec()
            self.counted = False
        # Every group, even when the layer fails to leave one (hub.leave_all).
        await hub().leave_all(getattr(self, "joined", ()), self)
        self.joined = []

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels' own dispatch hops to the one sync thread to close stale database
        # connections before every event; with hundreds of sockets on a chat that
        # serialises the whole fan-out. The handlers here reach the database only through
        # database_sync_to_async, which does that cleanup itself.
        if message.get("type") in LIVE_EVENTS:
            await self.live_event(message)
            return
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
            if self.follows_sign_in and time.monotonic() - self.checked_at > RECHECK_EVERY:
                await self.recheck()  # a session can also just expire

    # --- the sign-in behind the socket (channels_app.live_auth) ---

    follows_sign_in = False  # whether the socket closes when the sign-in that opened it ends
    session_key_at_open: str | None = None

    def signed_in(self) -> bool:
        """Whether the credentials that opened the socket still hold (sync, reads the database)."""
        return True

    def more_auth_groups(self, owner: ChatOwner) -> tuple[str, ...]:
        """Groups besides the user's own whose `auth.changed` makes this socket check again."""
        return ()

    async def auth_changed(self, event: dict[str, Any]) -> None:
        if event.get("ended") and event["ended"] == session_fingerprint(self.session_key_at_open):
            await self.sign_out()
            return
        # Checked a moment later, off this socket's event loop turn: live events keep flowing meanwhile.
        task = asyncio.get_running_loop().create_task(self._recheck_after(RECHECK_DELAY))
        self.rechecks.add(task)
        task.add_done_callback(self.rechecks.discard)

    async def _recheck_after(self, delay: float) -> None:
        await asyncio.sleep(delay)
        await self.recheck()

    async def recheck(self) -> None:
        self.checked_at = time.monotonic()
        try:
            still = await database_sync_to_async(self.signed_in)()
        except Exception:
            logger.exception("could not check a live socket's sign-in")
            return  # checked again on the next change or ping
        if not still:
            await self.sign_out()

    async def sign_out(self) -> None:
        if self.owner is None:
            return
        self.owner = None
        await self.send_json({"type": "signed_out"})
        await self.close(code=CLOSE_SIGNED_OUT)

    def query(self) -> dict[str, str]:
        raw = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        return {k: v[-1] for k, v in raw.items()}

    async def _join(self, group: str) -> None:
        await hub().join(group, self)
        self.joined.append(group)

    async def _leave(self, group: str) -> None:
        await hub().leave(group, self)
        if group in self.joined:
            self.joined.remove(group)

    # --- events from this process's hub (qorven.runtime.hub) ---

    async def hub_event(self, event: dict[str, Any], encoder: Encoder) -> None:
        """One event of a group this socket is in. What needs only frames is sent now,
        encoded once for every socket in the same state; what needs the database (a
        catch-up, a new session, a reply's text so far) runs on this socket's own task,
        with the events after it queued behind it, so no other socket waits for it."""
        if self.owner is None:
            return  # refused or signed out: closing
        if self.backlog is not None:
            self.backlog.append(("event", event))
            return
        if event.get("type") not in LIVE_EVENTS:
            self._later(("event", event))
            return
        step = self.cursor.live(event)
        if step.follow is None and not step.catch_up and step.snapshot is None:
            for frame in step.frames:
                await self.frame(encoder.text(frame))
            return
        self._later(("step", step))

    async def frame(self, text: str) -> None:
        """Send one text frame of a live event. Straight to the server when it can: the
        session middleware's wrapper around `send` (it saves sessions on HTTP responses)
        read the lazy session twice a frame, a fifth of a fan-out's time."""
        send = self.scope.get(RAW_SEND) or self.base_send
        await send({"type": "websocket.send", "text": text})

    def _later(self, item: tuple[str, Any]) -> None:
        if self.backlog is None:
            self.backlog = deque()
            self.draining = asyncio.get_running_loop().create_task(self._drain())
        self.backlog.append(item)

    async def _drain(self) -> None:
        try:
            while self.backlog:
                kind, item = self.backlog.popleft()
                try:
                    if kind == "step":
                        await self.perform(item)
                    else:
                        await self.dispatch(item)
                except OSError:  # the client went (uvicorn's ClientDisconnected): its clean-up follows
                    logger.debug("a live socket closed as an event reached it")
                    return
                except Exception:
                    logger.exception("a live event could not be handled")
        finally:
            self.backlog = None

    async def hub_resync(self, event: dict[str, Any]) -> None:
        """The hub lost the layer for a while (events published meanwhile never reached
        it): send what was stored since the last message sent."""
        await self.catch_up()

    # --- catching up ---

    async def watch(self, session, *, after_seq: int | None) -> None:
        """Follow `session`: join its group first (so nothing falls between the database
        read and the live events), then send what the client is missing."""
        if self.cursor.session_id is not None:
            await self._leave(session_group(self.cursor.session_id))
        if session is None:
            self.cursor.watch(None, sent_seq=0)
            await self.send_json({"type": "session", "session_id": None, "reset": True})
            return
        await self._join(session_group(session.pk))
        behind = session.last_seq - (after_seq or 0)
        reset = after_seq is None or after_seq > session.last_seq or behind > CATCH_UP_MAX
        await self.send_json({"type": "session", "session_id": session.pk, "reset": reset})
        if reset:
            # The newest page; the client scrolls back for older ones.
            events = await database_sync_to_async(chat_events)(session=session, limit=PAGE)
            self.cursor.watch(session.pk, sent_seq=events[0]["seq"] - 1 if events else session.last_seq)
            await self._send(self.cursor.rows(events))
        else:
            self.cursor.watch(session.pk, sent_seq=after_seq or 0)
        await self.catch_up()
        await self._send(self.cursor.stream(await sync_to_async(stream_snapshot)(session.pk)))

    async def catch_up(self) -> None:
        """Send every stored message after the last one sent."""
        session = await database_sync_to_async(chat_session_get)(owner=self.owner, session_id=self.cursor.session_id)
        if session is None:
            return
        while True:
            events = await database_sync_to_async(chat_events)(
                session=session, after_seq=self.cursor.sent_seq, limit=CATCH_UP_MAX
            )
            await self._send(self.cursor.rows(events))
            if len(events) < CATCH_UP_MAX:
                return

    async def _send(self, frames: list[dict[str, Any]]) -> None:
        for frame in frames:
            await self.send_json(frame)

    # --- live events from the channel layer ---

    async def live_event(self, event: dict[str, Any]) -> None:
        """Do what the cursor says an event means (channels_app.chat_cursor)."""
        await self.perform(self.cursor.live(event))

    async def perform(self, step: Step) -> None:
        if step.follow is not None:
            session = await database_sync_to_async(chat_session_get)(owner=self.owner, session_id=step.follow)
            if session is not None:
                await self.watch(session, after_seq=0)
            return
        if step.catch_up:
            await self.catch_up()
        await self._send(step.frames)
        if step.snapshot is not None:
            snapshot = await sync_to_async(stream_snapshot)(self.cursor.session_id)
            await self._send(self.cursor.stream(snapshot, reply_to=step.snapshot))


class ChatConsumer(LiveChatConsumer):
    """`/ws/chat/<tenant>/<qor>/`: the chat page (and any API client) of a member."""

    follows_sign_in = True

    async def authorize(self) -> ChatOwner | None:
        kwargs = self.scope["url_route"]["kwargs"]
        user = self.scope.get("user")
        raw = self._bearer() or self.query().get("token", "")
        self.token_raw = raw
        session = self.scope.get("session")
        self.session_key_at_open = None if raw or session is None else session.session_key
        if raw:
            token = await database_sync_to_async(api_token_authenticate)(raw=raw)
            if token is None or token.tenant.slug != kwargs["tenant"]:
                return None
            user = token.user
        if user is None or not user.is_authenticated:
            return None
        # The surface the client writes on (the terminal client: tui), whose session it
        # follows in legacy mode; the page's is web.
        surface = self.query().get("surface") or Channel.WEB
        if surface not in (Channel.WEB, Channel.TUI):
            return None
        try:
            return await database_sync_to_async(chat_owner)(
                user=user, tenant_slug=kwargs["tenant"], qor_slug=kwargs["qor"], surface=surface
            )
        except NotFound:
            return None

    def signed_in(self) -> bool:
        kwargs = self.scope["url_route"]["kwargs"]
        owner = self.owner
        if owner is None:
            return False
        return socket_signed_in(user_id=owner.user.pk, tenant_slug=kwargs["tenant"], qor_slug=kwargs["qor"],
                                session_key=self.session_key_at_open, token=self.token_raw or None)

    def _bearer(self) -> str:
        for name, value in self.scope.get("headers", []):
            if name == b"authorization":
                scheme, _, raw = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer":
                    return raw.strip()
        return ""


class WebchatConsumer(LiveChatConsumer):
    """`/ws/webchat/<public key>/?visitor=<token>`: a visitor of the embed on a tenant's site.
    The socket lives as long as what let the visitor in: the embed's binding (enabled, the
    workspace's webchat switch on), their membership or their anonymous identity (not
    denied), their token (not expired)."""

    follows_sign_in = True

    async def authorize(self) -> ChatOwner | None:
        token = self.query().get("visitor", "")
        if not token:
            return None
        return await database_sync_to_async(self._visitor)(token)

    def _visitor(self, token: str) -> ChatOwner | None:
        from .webchat import WebchatRefused, webchat_visitor

        try:
            visitor = webchat_visitor(public_key=self.scope["url_route"]["kwargs"]["key"], token=token, create=False)
        except WebchatRefused:
            return None
        return visitor.owner if visitor is not None else None

    def signed_in(self) -> bool:
        owner = self.owner
        now = self._visitor(self.query().get("visitor", "")) if owner is not None else None
        return now is not None and owner is not None and now.user.pk == owner.user.pk

    def more_auth_groups(self, owner: ChatOwner) -> tuple[str, ...]:
        return (webchat_auth_group(owner.tenant.pk),)


def _int(value: str | None) -> int | None:
    try:
        number = int(value) if value not in (None, "") and len(value) <= 20 else None
    except ValueError:
        return None
    return number if number is not None and 0 <= number <= QUERY_INT_MAX else None
