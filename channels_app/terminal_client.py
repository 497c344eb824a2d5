"""`qorven chat` as a client of a running server: what the person types goes through the
server's message API (channel `tui`) and the timeline arrives over its WebSocket, like a
browser page's. So on the embedded default — where the channel layer lives inside the
server process — a page open in a browser sees the terminal's messages (and the terminal
the page's) as they happen, and the server's own worker answers them.

The terminal still reads the database for its opening history and to fill a gap (it is a
management command of the same installation); it authenticates to the server with an API
token it makes for the session and revokes when it leaves. The token lapses TOKEN_LIFETIME
after it was last renewed, which the terminal does while it runs: one killed before it
could revoke it (SIGKILL, a machine gone) leaves no token that works for long.
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import math
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable
from urllib.parse import quote, urlsplit

import httpx
from django.db import close_old_connections
from django.utils import timezone

from tenancy.errors import NotFound
from tenancy.models import ApiToken
from tenancy.selectors import api_token_authenticate
from tenancy.services import api_token_create

from .adapters.base import retry_after_seconds
from .chat import ChatOwner
from .terminal_answers import (SEND_TRIES, SEND_WAIT_DEFAULT, json_object, refusal_notice, send_wait,
                               unavailable_notice)
from .terminal import Emit, Follower

logger = logging.getLogger(__name__)

PROBE_TIMEOUT = 1.0  # seconds to decide whether a server answers at --server
TOKEN_LIFETIME = timedelta(minutes=30)  # the session token works this long past its last renewal
TOKEN_RENEW_EVERY = 300.0  # seconds between renewals while the terminal runs
SIGNED_OUT = 4401  # channels_app.consumers.sign_in.CLOSE_SIGNED_OUT


def plain_http_to_another_machine(url: str) -> bool:
    """Whether `url` is http:// (unencrypted) to a host that is not this machine: one not
    in 127.0.0.0/8, not ::1 and not `localhost`. Every request of the terminal carries its
    sign-in token; to such a host it would cross the network in clear, for anyone on the
    way to read and use as the person."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "http":
        return False
    host = (parts.hostname or "").rstrip(".").lower()
    if host == "localhost":
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return True  # a name: wherever it leads, it is not known to be this machine
    mapped = getattr(address, "ipv4_mapped", None)
    return not (address.is_loopback or (mapped is not None and mapped.is_loopback))


class ServerUnavailable(Exception):
    """A 503 other than the cache's (its database away, a proxy in front of it): `reason`,
    our notice for it (unavailable_notice); `retry_after`, seconds (None: not said)."""

    def __init__(self, reason: str, retry_after: float | None) -> None:
        super().__init__(reason)
        self.reason, self.retry_after = reason, retry_after


class AnswerLost(Exception):
    """A message's POST reached the server and no answer came back (the connection dropped,
    or `timed_out`: none within the link's timeout): stored or not, it may be sent again
    under its Idempotency-Key."""

    def __init__(self, *, timed_out: bool) -> None:
        super().__init__()
        self.timed_out = timed_out


GAVE_UP_WAITING = "Stopped waiting for the server: the line is back to send again (stored once if it had it)."


@dataclass
class Sent:
    seq: int
    expects_reply: bool


class ServerLink:
    """The terminal's session with one server: an API token, an HTTP client for sending."""

    def __init__(self, owner: ChatOwner, base_url: str, *, timeout: float) -> None:
        self.owner = owner
        self.base = base_url.rstrip("/")
        self.token_row, self.token = api_token_create(tenant=owner.tenant, user=owner.user, name="qorven chat",
                                                      expires_at=timezone.now() + TOKEN_LIFETIME)
        self.timeout = timeout  # seconds a request waits for the server (connecting, each read)
        self.http = httpx.Client(base_url=self.base, timeout=timeout,
                                 headers={"Authorization": f"Bearer {self.token}"})
        self._closed = threading.Event()
        # (content, Idempotency-Key) of the last message sent, until the server has answered
        # it: the same text sent next (the line given back after a failure) goes under the
        # same key, so a message the server stored unseen is not stored twice.
        self._unsure: tuple[str, str] | None = None
        self._revoked = False
        self._revoking = threading.Lock()
        self._renewer = threading.Thread(target=self._renew, name="qorven-chat-token", daemon=True)
        self._renewer.start()

    def _renew(self) -> None:
        while not self._closed.wait(TOKEN_RENEW_EVERY):
            try:
                ApiToken.objects.filter(pk=self.token_row.pk, revoked_at__isnull=True).update(
                    expires_at=timezone.now() + TOKEN_LIFETIME)
            except Exception:  # the database away for a moment: the next round tries again
                logger.warning("could not renew the terminal's token", exc_info=True)
            finally:
                close_old_connections()

    @classmethod
    def reachable(cls, base_url: str) -> bool:
        """Whether a Qorven server answers at `base_url` (its liveness probe)."""
        try:
            response = httpx.get(base_url.rstrip("/") + "/healthz", timeout=PROBE_TIMEOUT)
        except httpx.HTTPError:
            return False
        return response.status_code == 200 and response.headers.get("content-type", "").startswith("application/json")

    def send(self, content: str, *, waiting: Callable[[str], None] = lambda said: None,
             stop: threading.Event | None = None) -> Sent:
        """Post one message on channel tui. Told to come back later (a 503 or 429 with
        Retry-After; a 503 without, in SEND_WAIT_DEFAULT), the connection lost once the
        server had the request (in SEND_WAIT_DEFAULT), or no answer within the link's
        timeout (at once: it has waited already), it says so through `waiting` and sends it
        again, SEND_TRIES times in all, under one Idempotency-Key: a message the server
        stored before a 503 (a proxy's, after a timeout) or before the connection dropped is
        stored once. So is the same text sent next, after a failure (`_unsure`). `stop`,
        set: no more tries (the person stopped waiting). ValueError: refused as it is (our
        API's reason, else our notice), or the server did not answer; NotFound: this person
        may not write here any more."""
        unsure = self._unsure
        key = unsure[1] if unsure is not None and unsure[0] == content else uuid.uuid4().hex
        self._unsure = (content, key)
        response = self._tries(content, key, waiting, stop or threading.Event())
        if response.status_code in (401, 403, 404):
            raise NotFound("not a member of this workspace any more")
        if response.status_code >= 500:
            raise ValueError(unavailable_notice(response))
        if response.status_code >= 400:
            raise ValueError(refusal_notice(response))
        message = json_object(response)["message"]
        if self._unsure == (content, key):
            self._unsure = None
        return Sent(seq=message["seq"], expects_reply=message.get("answer_state") == "pending")

    def _tries(self, content: str, key: str, waiting: Callable[[str], None], stop: threading.Event) -> httpx.Response:
        """The answer to the message's last try (see send)."""
        for tries in range(1, SEND_TRIES + 1):
            if stop.is_set():
                raise ValueError(GAVE_UP_WAITING)
            try:
                response = self._post_message(content, key)
            except AnswerLost as lost:
                if tries == SEND_TRIES:
                    raise ValueError(f"the server at {self.base} did not answer: the message may not have been "
                                     "sent (sent again now, as it is, it is stored once)") from None
                if lost.timed_out:
                    wait, said = 0.0, (f"The server is not answering (nothing in {self.timeout:g} s); "
                                       f"sending again, try {tries + 1} of {SEND_TRIES}.")
                else:
                    wait = SEND_WAIT_DEFAULT
                    said = f"The connection was lost before the server answered; sending again in {math.ceil(wait)} s."
            else:
                wait = send_wait(response) if tries < SEND_TRIES else None
                if wait is None:
                    return response
                said = f"The server is busy; sending again in {math.ceil(wait)} s."
            waiting(said)
            if self._paused(wait, stop):
                raise ValueError(GAVE_UP_WAITING if stop.is_set() else
                                 "the terminal closed before the message could be sent again")
        raise AssertionError("unreachable: the last try returns or raises")

    def _paused(self, wait: float, stop: threading.Event) -> bool:
        """Waits `wait` seconds; True when the terminal left or `stop` was set meanwhile."""
        deadline = time.monotonic() + wait
        while not (self._closed.is_set() or stop.is_set()):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            stop.wait(min(left, 0.1))  # either event ends the pause within a tenth of a second
        return True

    def _post_message(self, content: str, key: str) -> httpx.Response:
        """AnswerLost: the server had the request and no answer came (stored or not)."""
        # The token names the workspace; the channel says this is the terminal.
        try:
            return self.http.post(f"/v1/qors/{quote(self.owner.qor.slug)}/messages",
                                  json={"content": content, "channel": "tui"}, headers={"Idempotency-Key": key})
        except (httpx.ConnectError, httpx.ConnectTimeout):  # down, or restarting: it never had it
            raise ValueError(f"the server at {self.base} did not answer: the message was not sent") from None
        except httpx.TimeoutException:  # it had the request, and has not answered within the timeout
            raise AnswerLost(timed_out=True) from None
        except httpx.TransportError:  # it had the request, but the connection dropped before its answer
            raise AnswerLost(timed_out=False) from None

    def signed_in(self) -> bool:
        """Whether the server would still take this terminal's token: not revoked, not
        lapsed, its user still a member (read from the database, as the server does)."""
        return api_token_authenticate(raw=self.token) is not None

    def stop(self, reply_to: int) -> bool:
        """Ask the server to stop the reply to message `reply_to` (the page's Stop); False
        when no answer to it is being written any more. NotFound: this person may not
        write here any more; StopUnavailable: the server could not pass it on just now (its
        cache away); ServerUnavailable: another 503 (its database away, a proxy's);
        httpx.HTTPError: the server could not be asked."""
        from qorven.agent.stop import STOP_UNAVAILABLE_CODE, StopUnavailable

        response = self.http.post(f"/v1/qors/{quote(self.owner.qor.slug)}/stop",
                                  json={"reply_to": reply_to, "surface": "tui"})
        if response.status_code in (401, 403, 404):
            raise NotFound("not a member of this workspace any more")
        if response.status_code == 409:
            return False
        if response.status_code == 503:
            body = json_object(response)
            retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            if body.get("code") == STOP_UNAVAILABLE_CODE:
                raise StopUnavailable(retry_after)
            raise ServerUnavailable(unavailable_notice(response), retry_after)
        response.raise_for_status()
        return True

    def socket_url(self, *, session_id: int | None, last_seq: int) -> str:
        parts = urlsplit(self.base)
        scheme = "wss" if parts.scheme == "https" else "ws"
        # The token goes in a header (socket_headers), never in the URL: servers and proxies log URLs.
        url = (f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}/ws/chat/{quote(self.owner.tenant.slug)}/"
               f"{quote(self.owner.qor.slug)}/"
               f"?surface=tui")
        if session_id is not None:
            url += f"&session={session_id}&last_seq={last_seq}"
        return url

    def socket_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def revoke(self) -> None:
        """Sign this terminal out: its token is refused from now on. Once; the first thing
        done on the way out, before waiting for threads to end: a window closed may be
        followed by a SIGKILL, and a process killed before this leaves a working token."""
        with self._revoking:  # from the signal's thread and the clean-up, once
            if self._revoked:
                return
            try:
                ApiToken.objects.filter(pk=self.token_row.pk).update(revoked_at=timezone.now())
            finally:
                if threading.current_thread() is not threading.main_thread():
                    close_old_connections()
            self._revoked = True

    def close(self) -> None:
        if self._closed.is_set():  # left already (the follower stops once more on the way out)
            return
        self._closed.set()
        self.revoke()
        self._renewer.join(timeout=5)
        self.http.close()


class SocketFollower(Follower):
    """A Follower whose live events come from the server's WebSocket (the protocol of
    channels_app.consumers) instead of this process's channel layer. Reconnects with the
    session and the last seq shown, so nothing is missed or shown twice."""

    def __init__(self, owner: ChatOwner, emit: Emit, *, link: ServerLink) -> None:
        super().__init__(owner, emit)
        self.link = link

    def _subscribe(self) -> None:
        """Nothing to join here: the events come over the server's socket (_run)."""

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._follow_socket())
        finally:
            loop.close()

    async def _follow_socket(self) -> None:
        import websockets

        attempt = 0
        while not self._stop.is_set():
            with self._lock:
                url = self.link.socket_url(session_id=self.session_id, last_seq=self.cursor.sent_seq)
            try:
                # No Origin: a program with a token, not a page (qorven.asgi.ProgramSockets).
                async with websockets.connect(url, additional_headers=self.link.socket_headers(), open_timeout=10,
                                              max_size=2**24) as socket:
                    attempt = 0
                    await self._read(socket)
            except websockets.ConnectionClosed as exc:
                if exc.rcvd is not None and exc.rcvd.code == SIGNED_OUT and not self._stop.is_set():
                    self._notice("Signed out of the server: this terminal's token is no longer valid.")
                    self.signed_out.set()
                    return
            except (OSError, websockets.InvalidHandshake, asyncio.TimeoutError) as exc:
                logger.debug("the chat socket could not connect: %s", type(exc).__name__)
            if self._stop.is_set():
                return
            attempt += 1
            await asyncio.sleep(min(0.25 * 2**attempt, 5.0))

    async def _read(self, socket: Any) -> None:
        while not self._stop.is_set():
            try:
                raw = await asyncio.wait_for(socket.recv(), timeout=0.25)
            except asyncio.TimeoutError:
                continue
            try:
                frame = json.loads(raw)
            except ValueError:
                continue
            # Off the loop: a frame can send the follower to the database (a new session,
            # a catch-up), which Django refuses from a thread running an event loop.
            await asyncio.to_thread(self._frame_locked, frame)
        await socket.close()

    def _frame_locked(self, frame: dict[str, Any]) -> None:
        try:
            with self._lock:
                self._frame(frame)
        finally:
            close_old_connections()

    def _frame(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "session":
            if frame.get("session_id") is not None and frame["session_id"] != self.session_id:
                self._follow(frame["session_id"])  # /clear or a compaction elsewhere: from the database
            return
        if kind == "message.stream" and not frame["text"]:  # the reply starts afresh (qorven.agent.turns)
            frame = {"type": "message.restart", "reply_to": frame["reply_to"]}
        elif kind == "message.stream":  # a reply's text so far (after a reconnect): the part not shown
            frame = {"type": "message.chunk", "reply_to": frame["reply_to"], "delta": frame["text"], "offset": 0}
        if frame["type"] in ("message.new", "message.restart", "message.chunk", "message.done", "message.answer",
                             "message.delivery"):
            self.handle({**frame, "session_id": self.session_id})

    def _notice(self, text: str) -> None:
        self.emit({"type": "message.new", "seq": 0, "role": "system", "content": text, "channel": "tui",
                   "sender_name": "", "created_at": timezone.now().isoformat()})

    def stop(self) -> None:
        self._stop.set()
        self.link.revoke()  # before the socket's thread is waited for (up to 5 s)
        super().stop()
        self.link.close()
