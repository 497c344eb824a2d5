"""One subscription per group per process: live events fanned out to local sockets directly.

Left to Channels, every open socket is a channel of its own on the layer: an event for a
chat with 200 sockets open in a process is put in 200 channels (200 LPUSHes on Redis),
woken 200 times through each consumer's `await_many_dispatch`, and encoded to JSON 200
times. The hub joins each group once per process with a channel of its own, receives each
event once, and hands it to the process's subscribers of that group in one pass, on the
server's event loop; a subscriber whose socket needs nothing but a frame sends it there and
then (see channels_app.consumers), and the JSON of a frame equal to the one before is
reused (`Encoder`). A subscriber is anything with `async hub_event(event, encoder)`.

Events name their group (`group`; set by qorven.runtime.publisher). One hub per event loop:
the server has one; tests open several in turn.

An event published in this process (a message posted to this server, a turn of the
embedded worker) is handed to this process's hubs by the live sender, or by the thread
that stored it when nothing waits ahead of it (`hubs_hand`; see qorven.runtime.publisher),
not only through the layer: on Redis the trip out and back took
2–3 ms of a fan-out. The copy that still goes through the layer (for other processes) names the hubs
that had it already (`local_to`), and they drop it.

The layer keeps the hub's memberships, and may lose them: channels_redis forgets a
membership after its group expiry (a day by default), and a Redis restarted without its
data forgets them all. The hub renews its memberships every RENEW_EVERY seconds (a renewal
failing while Redis is away is logged once, then counted: RepeatedFailure), and after
the layer failed under it (Redis away) it joins its groups again as soon as the layer
answers and tells every subscriber to catch up (`hub_event` with `{"type": "hub.resync"}`):
what was published meanwhile is in the database, not on the layer.

A socket that closes leaves all its groups (`leave_all`): the hub forgets it in each at once,
and leaves on the layer each group no socket of its process watches any more, every one
tried. One the layer fails to leave (Redis away) is left again every RETRY_AFTER seconds
until it answers: its subscription would otherwise bring the group's events to this
process, for nobody, for the life of the server (channels_redis' pub/sub layer subscribes
again to it as it reconnects). On that layer a leave that returned may not be done either:
one whose UNSUBSCRIBE was lost with the connection, or went out while the connection was
being made again, is taken back by the reconnection (see pubsub_layer.held). So the hub
looks again RETRY_AFTER seconds after each leave there, until Redis has confirmed it, and
leaves again each group the layer took back.

On the pub/sub layer a join takes effect later than it returns: channels_redis sends
SUBSCRIBE and goes on without waiting for Redis to take it, so an event published by
another process just after the join (the first chunks of a reply to a new chat) can be
missed, though the socket already read the database "after joining". So on that layer a
join returns only once the hub has heard its own note on the group (`hub.joined`, sent
again every JOIN_NOTE_EVERY seconds until heard, JOIN_HEARD_WITHIN at most; see
qorven.runtime.pubsub_layer): from then on, every event published to the group reaches
this process.
"""
from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import threading
import uuid
import weakref
from collections import deque
from collections.abc import Iterable
from typing import Any, Protocol

from channels.layers import get_channel_layer

from .pubsub_layer import JOIN_HEARD_WITHIN, JOIN_NOTE_EVERY, JOINED, held, is_pubsub
from .repeated_failure import RepeatedFailure

logger = logging.getLogger(__name__)

RETRY_AFTER = 1.0  # seconds before the hub reads the layer again after a failure
RENEW_EVERY = 3600.0  # seconds between renewals of the hub's group memberships
RESYNC = {"type": "hub.resync"}
LOCAL_TO = "local_to"  # the ids of the hubs an event was handed to in its own process
# Where a group the hub has left stands on the layer (Hub._left_behind):
UNLEFT = "unleft"  # not left there yet: the leave failed (Redis away) or was not tried
SENT = "sent"  # left; on the pub/sub layer, until Redis confirms it
SENT_AGAIN = "sent again"  # left after a failure or after the layer took the leave back (logged once done)


class Subscriber(Protocol):
    async def hub_event(self, event: dict[str, Any], encoder: Encoder) -> None: ...


class Encoder:
    """JSON text of frames for one event's fan-out: a frame equal to the last one encoded
    (the same message for subscribers in the same state) is not encoded again."""

    __slots__ = ("_frame", "_text")

    def __init__(self) -> None:
        self._frame: dict[str, Any] | None = None
        self._text = ""

    def text(self, frame: dict[str, Any]) -> str:
        if frame != self._frame:
            self._frame, self._text = frame, json.dumps(frame)
        return self._text


class Hub:
    def __init__(self, layer: Any = None) -> None:
        self.layer = layer if layer is not None else get_channel_layer()
        self.id = uuid.uuid4().hex
        self.loop: asyncio.AbstractEventLoop | None = None  # the loop it delivers on, from its first join
        self._handed: deque[dict[str, Any]] = deque()  # events handed over in this process, in order
        self._handing: asyncio.Task[None] | None = None
        self._notes: dict[str, asyncio.Future[None]] = {}
        self.members: dict[str, set[Subscriber]] = {}
        self.channel: str | None = None
        self._reader: asyncio.Task[None] | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._left_behind: dict[str, str] = {}  # groups the hub has left, the layer perhaps not yet
        self._leaver: asyncio.Task[None] | None = None
        self._read_failures = RepeatedFailure(logger, "the live hub could not read from the channel layer")
        self._renew_failures = RepeatedFailure(logger, "the live hub could not renew its groups")

    async def join(self, group: str, subscriber: Subscriber) -> None:
        async with self._lock:
            if self.channel is None:
                # The layer's default prefix: channels_redis reads one process's channels
                # with one receive loop, which serves only the names it made alike.
                self.channel = await self.layer.new_channel()
            loop = self.loop = asyncio.get_running_loop()
            # The hub's tasks run in contexts of their own, not in a copy of the first
            # socket's (its log context, its connection's asgiref state).
            if self._reader is None or self._reader.done():
                self._reader = loop.create_task(self._read(), name="qorven-hub", context=contextvars.Context())
            if self._renewer is None or self._renewer.done():
                self._renewer = loop.create_task(self._renew(), name="qorven-hub-renew",
                                                 context=contextvars.Context())
            members = self.members.get(group)
            if members is None:
                # Kept only once joined: a join cancelled on the way (its socket closed)
                # or failed left an empty group, never left again, whose events the hub
                # took for the rest of its life.
                members = set()
                try:
                    await self.layer.group_add(group, self.channel)
                    if is_pubsub(self.layer):
                        await self._heard(group)
                except BaseException:
                    await _discard_quietly(self.layer, group, self.channel)
                    raise
                self.members[group] = members
                self._left_behind.pop(group, None)  # the hub's again
            members.add(subscriber)

    async def _heard(self, group: str) -> None:
        """Send a note to `group` until this hub hears it back (see the module's note)."""
        token = uuid.uuid4().hex
        heard = asyncio.get_running_loop().create_future()
        self._notes[token] = heard
        try:
            async with asyncio.timeout(JOIN_HEARD_WITHIN):
                while not heard.done():
                    await self.layer.group_send(group, {"type": JOINED, "group": group, "token": token})
                    await asyncio.wait({heard}, timeout=JOIN_NOTE_EVERY)
        except TimeoutError:
            logger.warning("the live hub did not hear its join of %s within %s s", group, JOIN_HEARD_WITHIN)
        finally:
            self._notes.pop(token, None)

    async def leave(self, group: str, subscriber: Subscriber) -> None:
        await self.leave_all([group], subscriber)

    async def leave_all(self, groups: Iterable[str], subscriber: Subscriber) -> None:
        """`subscriber` leaves `groups` (a socket that closes: all of its own). The hub
        forgets it in each before it asks anything of the layer, and leaves on the layer
        every group no one watches any more; a failure there (Redis away) is logged once
        for all of them, and those groups are left again later (see the module's note)."""
        async with self._lock:
            emptied = []
            for group in groups:
                members = self.members.get(group)
                if members is None:
                    continue
                members.discard(subscriber)
                if not members:
                    del self.members[group]
                    emptied.append(group)
            self._left_behind.update(dict.fromkeys(emptied, UNLEFT))
            try:
                failed, error = await self._discard(emptied)
            finally:  # also when cancelled midway: what is not left yet is left later
                if self._left_behind:
                    self._leave_later()
        if failed:
            logger.warning("the live hub could not leave %s on the channel layer (%s); it tries again every %s s",
                           ", ".join(failed), error, RETRY_AFTER)

    async def _discard(self, groups: Iterable[str], *, again: bool = False) -> tuple[list[str], str]:
        """Leave each of `groups` on the layer (under the lock); the groups it failed to
        leave, and the first failure's type and text. A group stays left behind until the
        layer no longer holds it."""
        failed, error = [], ""
        for group in groups:
            try:
                if again:
                    # channels_redis' pub/sub layer forgets a membership before it unsubscribes:
                    # after a failed or taken-back leave a second one alone does nothing.
                    # Joined again (SUBSCRIBE to a name Redis has already is no second
                    # subscription), the group is left for real.
                    await self.layer.group_add(group, self.channel)
                await self.layer.group_discard(group, self.channel)
            except Exception as exc:  # Redis away
                if _cancelling():  # the layer turned our cancellation into an error of its own
                    raise asyncio.CancelledError from None
                failed.append(group)
                error = error or f"{type(exc).__name__}: {exc}"
            else:
                if held(self.layer, group) is False:
                    self._left_behind.pop(group, None)
                else:  # on the pub/sub layer: looked at again later
                    self._left_behind[group] = SENT_AGAIN if again else SENT
        return failed, error

    def _leave_later(self) -> None:
        if self._leaver is None or self._leaver.done():
            self._leaver = asyncio.get_running_loop().create_task(
                self._leave_left_behind(), name="qorven-hub-leave", context=contextvars.Context())

    async def _leave_left_behind(self) -> None:
        while self._left_behind:
            await asyncio.sleep(RETRY_AFTER)
            async with self._lock:
                again, taken_back, left = [], [], []
                for group, state in sorted(self._left_behind.items()):
                    subscribed = held(self.layer, group)
                    if state == UNLEFT or subscribed:
                        again.append(group)
                        if state == SENT:
                            taken_back.append(group)
                    elif subscribed is False:  # done (None: Redis's answer is on its way)
                        del self._left_behind[group]
                        if state == SENT_AGAIN:
                            left.append(group)
                if taken_back:
                    logger.info("the channel layer subscribed again to %s as it reconnected, though the live hub "
                                "had left them; it leaves them again", ", ".join(taken_back))
                await self._discard(again, again=True)
            left += [group for group in again if group not in self._left_behind]
            if left:
                logger.info("the live hub has left %s on the channel layer", ", ".join(sorted(left)))

    def hand(self, group: str, event: dict[str, Any]) -> bool:
        """From any thread: deliver `event` (published in this process) to this hub's
        subscribers of `group` on its loop, after the events handed over before it.
        False when the hub has none (then the layer's copy is delivered as usual)."""
        loop = self.loop
        if loop is None or group not in self.members:  # a racing join reads the database after joining
            return False
        try:
            # In a context of its own: the caller's (a request's thread, with asgiref's
            # executor for that request, gone once it ends) would be copied into every
            # task the delivery starts, and their database calls would fail there.
            loop.call_soon_threadsafe(self._take, event, context=contextvars.Context())
        except RuntimeError:  # the loop has closed
            return False
        return True

    def _take(self, event: dict[str, Any]) -> None:
        self._handed.append(event)
        if self._handing is None or self._handing.done():
            self._handing = asyncio.get_running_loop().create_task(self._deliver_handed(), name="qorven-hub-local")

    async def _deliver_handed(self) -> None:
        while self._handed:
            await self.deliver(self._handed.popleft())

    async def _read(self) -> None:
        failed = False
        while True:
            if _cancelling():  # a library swallowed our cancellation and returned: stop all the same
                raise asyncio.CancelledError
            try:
                if failed:
                    failed = False
                    # Joining no group proves nothing of the layer (a hub whose sockets
                    # have all closed): it has answered once a group is joined again, or
                    # an event read. Else a hub with no socket said so once a second.
                    if await self._rejoin():
                        self._read_failures.succeeded()
                        logger.info("the live hub reads the channel layer again; its sockets catch up")
                        await self._everyone(RESYNC)
                event = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the layer's server went away: join again once it answers
                if _cancelling():  # the layer turned our cancellation into an error of its own
                    raise asyncio.CancelledError from None
                self._read_failures.failed(f"{type(exc).__name__}: {exc}")
                failed = True
                await asyncio.sleep(RETRY_AFTER)
                continue
            self._read_failures.succeeded()
            if self.id not in event.get(LOCAL_TO, ()):
                await self.deliver(event)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(RENEW_EVERY)
            try:
                renewed = await self._rejoin()
            except Exception as exc:  # the reader sees the layer fail too, and joins again after it
                if not _cancelling():
                    self._renew_failures.failed(f"{type(exc).__name__}: {exc}")
            else:
                if renewed:  # joining no group proves nothing of the layer
                    self._renew_failures.succeeded()
            if _cancelling():
                raise asyncio.CancelledError

    async def _rejoin(self) -> int:
        """Join every group of the hub's again; how many."""
        async with self._lock:
            groups = list(self.members)
            for group in groups:
                await self.layer.group_add(group, self.channel)
            return len(groups)

    async def _everyone(self, event: dict[str, Any]) -> None:
        encoder = Encoder()
        for subscriber in {s for members in list(self.members.values()) for s in members}:
            try:
                await subscriber.hub_event(event, encoder)
            except OSError:
                logger.debug("a live socket closed as an event reached it")
            except Exception:
                logger.warning("a live subscriber failed an event", exc_info=True)

    async def deliver(self, event: dict[str, Any]) -> None:
        if event.get("type") == JOINED:  # a hub's note on joining: ours, or another process's
            heard = self._notes.get(event.get("token", ""))
            if heard is not None and not heard.done():
                heard.set_result(None)
            return
        members = self.members.get(event.get("group", ""))
        if not members:
            return
        encoder = Encoder()
        for subscriber in list(members):
            try:
                await subscriber.hub_event(event, encoder)
            except OSError:
                # The client went a moment before its event (uvicorn's ClientDisconnected):
                # its socket's clean-up follows, as for any socket that closes.
                logger.debug("a live socket closed as an event reached it")
            except Exception:  # one socket's failure is its own
                logger.warning("a live subscriber failed an event", exc_info=True)


async def _discard_quietly(layer: Any, group: str, channel: str) -> None:
    """Undo a join that did not complete, if the layer lets us (it may be what failed)."""
    try:
        await layer.group_discard(group, channel)
    except BaseException:  # a second cancellation, the layer away: its group expiry ends it
        # Debug: with Redis away this is the join's own failure again, which its socket
        # reports (once for all of them), and it came once per socket that tried to open.
        logger.debug("could not undo the live hub's join of %s", group, exc_info=True)


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub] = weakref.WeakKeyDictionary()
_hubs_lock = threading.Lock()  # the live sender reads _hubs from its own thread


def hub() -> Hub:
    """This event loop's hub."""
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        with _hubs_lock:
            found = _hubs[loop] = Hub()
    return found


def hubs_hand(group: str, event: dict[str, Any]) -> list[str]:
    """Hand `event` for `group`, published in this process, to this process's hubs that
    have subscribers of it (see the module's note); returns their ids."""
    with _hubs_lock:
        hubs = list(_hubs.values())
    return [found.id for found in hubs if found.hand(group, event)]
