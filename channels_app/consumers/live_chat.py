"""What every live socket does, whoever it is for: connect and join the chat's groups,
catch the client up from the database, and follow the chat's events as this process's hub
hands them over. Kept whole because its order is the protocol's (channels_app.consumers):
a group is joined before the database is read, so nothing falls between the two."""
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

from qorven.runtime import metrics
from qorven.runtime.hub import Encoder, hub
from qorven.runtime.publisher import chat_group, session_group
from qorven.runtime.repeated_failure import RepeatedFailure
from qorven.runtime.streams import stream_snapshot

from ..chat import CATCH_UP_MAX, PAGE, ChatOwner, chat_events, chat_session, chat_session_get, chat_stream
from ..chat_cursor import ChatCursor, Step
from ..json_body import QUERY_INT_MAX, BodyRefused, json_parse
from ..live_auth import auth_group
from .sign_in import SignInFollowingConsumer

# The name the live sockets have always logged under.
logger = logging.getLogger("channels_app.consumers")

CLOSE_REFUSED = 4403
CLOSE_TRY_AGAIN = 1013  # the layer cannot be joined now (Redis away): the page tries again, and catches up
# The ASGI server's send, put in the scope by the outermost middleware (qorven.asgi).
RAW_SEND = "qorven.raw_send"
# What the layer carries to a chat's sockets; each goes through the chat cursor.
LIVE_EVENTS = frozenset({"message.new", "message.chunk", "message.restart", "message.done", "message.answer",
                         "message.delivery",
                         "message.regenerating", "message.transcribed", "session.started"})

# Redis away fails the join of every socket that opens (or follows a new session) meanwhile.
_join_failures = RepeatedFailure(logger, "a live socket could not join its chat on the channel layer; it is closed "
                                 "and the page tries again")


class LayerAway(Exception):
    """A group of the socket's chat could not be joined: the socket closes, the client
    connects again later and catches up by seq."""


class LiveChatConsumer(SignInFollowingConsumer):
    """Watches one person's canonical chat with one Qor. Subclasses say who that is."""

    owner: ChatOwner | None = None
    # No channel of the socket's own on the layer: its events come through this process's
    # hub, and nothing is ever sent to a socket's channel. Channels reads one for every
    # consumer on a configured layer; on channels_redis' lists layer that read failed with
    # Redis and ended every open socket with a traceback of its own (the pub/sub layer
    # subscribed once per socket for it). An alias that names no layer is none.
    channel_layer_alias = "qorven.none"

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
        except LayerAway:
            await self._close_to_retry()
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
            self.recheck_every_while_open()
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
            await self.recheck_when_due()

    def query(self) -> dict[str, str]:
        raw = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        return {k: v[-1] for k, v in raw.items()}

    async def _join(self, group: str) -> None:
        try:
            await hub().join(group, self)
        except Exception as exc:  # Redis away (a cancellation is no Exception: it goes on up)
            _join_failures.failed(f"{type(exc).__name__}: {exc}")
            raise LayerAway(group) from exc
        _join_failures.succeeded()
        self.joined.append(group)

    async def _close_to_retry(self) -> None:
        self.owner = None  # nothing more is sent; its groups are left as it closes
        await self.close(code=CLOSE_TRY_AGAIN)

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
                except LayerAway:  # following a new session
                    await self._close_to_retry()
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
            # The newest page of what it shows (the Qor's working takes no place: the
            # catch-up after it brings that of a turn still under way); the client scrolls
            # back for older ones.
            events = await database_sync_to_async(chat_events)(session=session, limit=PAGE, without_working=True)
            self.cursor.watch(session.pk, sent_seq=events[0]["seq"] - 1 if events else session.last_seq)
            await self._send(self.cursor.rows(events))
        else:
            self.cursor.watch(session.pk, sent_seq=after_seq or 0)
        await self.catch_up()
        await self._send(self.cursor.stream(await database_sync_to_async(chat_stream)(session=session)))

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
        if step.snapshot is not None:  # a chunk of it just came: its turn is under way
            snapshot = await sync_to_async(stream_snapshot)(self.cursor.session_id)
            await self._send(self.cursor.stream(snapshot, reply_to=step.snapshot))


def _int(value: str | None) -> int | None:
    try:
        number = int(value) if value not in (None, "") and len(value) <= 20 else None
    except ValueError:
        return None
    return number if number is not None and 0 <= number <= QUERY_INT_MAX else None
