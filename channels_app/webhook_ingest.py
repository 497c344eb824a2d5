"""Platform webhooks on the ASGI server, without Django's request cycle, stored in batches.

Under Daphne a request through Django's handler runs its sync middleware and view on a
thread made for that request, with a database connection of its own: ~7–15 ms of a
process's CPU for a webhook whose own work — verify a signature, parse, one INSERT — is
well under one. Webhooks are the busiest path there is and need none of that machinery
(no cookies, sessions, CSRF or templates), so `WebhookIngest` answers
`POST /v1/webhooks/<channel>` itself and hands every other request to Django:

- the body is read on the event loop, bounded by QORVEN_MAX_BODY (413 past it);
- it is screened there (channels_app.webhooks.webhook_screen), from the process's binding
  cache alone: a bad or missing signature is answered 401/403 at once, as the thread would,
  without taking a place among the webhooks waiting; a well-signed one is counted as its
  binding's workspace's, one the cache cannot tell as unverified (a binding not read
  lately, or junk);
- what waits to be stored is bounded (channels_app.webhook_bound: MAX_WAITING webhooks,
  MAX_WAITING_BYTES of bodies):
  past it — a database slow or away, a flood faster than it — a webhook is answered 503
  with Retry-After at once, its body not read if its Content-Length does not fit, instead
  of piling up in the server's memory; nothing of it is stored and the platform delivers
  it again. One warning says when a burst of them starts, one line when it ends;
- the bound is shared (channels_app.webhook_bound): each workspace with webhooks waiting,
  and the unverified as one more, holds at most its share, and one holding nothing is
  taken while the whole bound has room. A flood of junk posted by anyone, or one
  workspace's platform flooding, is answered 503 past its share while another
  workspace's webhooks are still taken;
- one long-lived thread (`GroupCommit`) takes the webhooks waiting, prepares each exactly
  as Django's view does (channels_app.webhooks.webhook_prepare: signature, binding,
  channel switch, parse; the Host header checked against ALLOWED_HOSTS) — the signature
  not checked again when the screening verified it against a fresh cache entry — stores the
  messages of all of them with one INSERT, a transaction of its own (`inbound_store`), and
  then answers each: concurrent webhooks share a commit instead of queuing for one each;
- nothing is answered 200 before its messages are committed. If the batch cannot be
  stored, each webhook is tried on its own, so one bad message fails alone; a webhook that
  still cannot be stored is answered 503 and the platform delivers it again;
- the tasks that process what a batch stored are queued by a second thread once the batch
  is answered: the broker's round trip is not part of the platforms' wait nor of the next
  batch's, and a broker that stalls holds up no answer. What a broker down refused is
  tried again every second (queued as soon as it is back); what is stored and still not
  queued (a long outage, a backlog past MAX_PUBLISHES_WAITING, a server stopped) is queued
  again by the sweeper (channels_app.sweep).
"""
from __future__ import annotations

import asyncio
import io
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.db import close_old_connections
from django.http import HttpResponse, JsonResponse

from qorven.runtime.database import DATABASE_DOWN, connections_drop_broken, database_down_response
from qorven.runtime.publish import publishes_held
from qorven.runtime.repeated_failure import RepeatedFailure
from qorven.runtime.security_headers import plain_headers
from qorven.runtime.url_prefix import app_path

from .models import ChannelBinding
from .receive import inbound_store
from .sweep import GRACE as SWEEP_GRACE
from .webhook_bound import UNVERIFIED, WaitingBound
from .webhooks import OK, Prepared, Screened, undelivered_record, webhook_prepare, webhook_screen

logger = logging.getLogger(__name__)

PATH = re.compile(r"^/v1/webhooks/([-a-zA-Z0-9_]+)$")
MAX_BATCH = 200  # webhooks stored in one statement at most
MAX_PUBLISHES_WAITING = 1000  # batches whose tasks wait for the publishing thread, at most
RETRY_EVERY = 1.0  # seconds between tries of the publishes a broker refused
BUSY_RETRY_AFTER = 5  # seconds: about what such a backlog takes to be stored


@dataclass(frozen=True)
class Answer:
    status: int
    headers: tuple[tuple[bytes, bytes], ...]  # a tuple: one answer may be sent many times
    body: bytes

    @classmethod
    def of(cls, response: HttpResponse) -> Answer:
        plain_headers(response.headers)  # Django's middleware never sees it
        body = response.content
        headers = [(name.encode("ascii"), value.encode("latin-1")) for name, value in response.items()
                   if name.lower() != "content-length"]
        return cls(response.status_code, (*headers, (b"content-length", str(len(body)).encode())), body)

    @classmethod
    def error(cls, status: int, message: str) -> Answer:
        return cls.of(JsonResponse({"error": message}, status=status))


_OK = Answer.of(JsonResponse(OK))  # the answer of (almost) every webhook, encoded once


def _busy() -> Answer:
    response = JsonResponse({"error": "too many webhooks waiting to be stored; deliver it again"}, status=503)
    response["Retry-After"] = str(BUSY_RETRY_AFTER)
    return Answer.of(response)


_BUSY = _busy()


@dataclass
class _Job:
    channel: str
    scope: dict[str, Any]
    body: bytes
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Answer]
    party: Hashable = UNVERIFIED  # whose share of the bound it takes: its binding's tenant's id, or UNVERIFIED
    request: ASGIRequest | None = None  # as the screening made it (its body parsed once)
    verified: ChannelBinding | None = None  # the binding the screening verified it for (signature checked once)


class GroupCommit:
    """The thread that prepares and stores webhooks, as many at once as are waiting."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._publishes: queue.SimpleQueue[list[Callable[[], None]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._publisher: threading.Thread | None = None
        self._lock = threading.Lock()
        self._publishing = 0  # batches handed to the publishing thread and not yet published
        self._published = threading.Condition()
        self._bound = WaitingBound()

    def waiting(self) -> tuple[int, int]:
        """(webhooks, bytes of their bodies) taken and not yet answered."""
        return self._bound.waiting()

    def admits(self, size: int) -> bool:
        """Whether a webhook of `size` bytes would be taken now (a glance before its body
        is read: `submit` decides, with its party's share)."""
        return self._bound.fits(size)

    def refuse(self) -> None:
        """Count a webhook refused before its body was read."""
        self._bound.refuse()

    def submit(self, channel: str, scope: dict[str, Any], body: bytes, *, party: Hashable = UNVERIFIED,
               request: ASGIRequest | None = None, verified: ChannelBinding | None = None,
               ) -> asyncio.Future[Answer] | None:
        """Take a webhook to be stored: the future of its answer, or None (counted as
        refused) when too many are waiting already, or its party holds its share."""
        if not self._bound.take(party, len(body)):
            self._bound.refuse(party)
            return None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Answer] = loop.create_future()
        self._start()
        self._jobs.put(_Job(channel, scope, body, loop, future, party, request, verified))
        return future

    def _start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="qorven-webhooks", daemon=True)
                self._thread.start()
            if self._publisher is None or not self._publisher.is_alive():
                self._publisher = threading.Thread(target=self._publish, name="qorven-webhook-tasks", daemon=True)
                self._publisher.start()

    def _run(self) -> None:
        while True:
            jobs = [self._jobs.get()]
            while len(jobs) < MAX_BATCH:
                try:
                    jobs.append(self._jobs.get_nowait())
                except queue.Empty:
                    break
            with publishes_held() as held:
                try:
                    answers = self.handle(jobs)
                except Exception:  # never lose the thread: every job still gets an answer
                    logger.exception("a batch of webhooks failed")
                    answers = [Answer.error(500, "internal error")] * len(jobs)
                finally:
                    close_old_connections()  # as at the end of a request: broken or aged-out ones
            if held and self._publishes.qsize() >= MAX_PUBLISHES_WAITING:
                logger.warning("the broker is behind (%d batches waiting to be queued): what %d webhooks stored"
                               " is left to the sweeper", self._publishes.qsize(), len(jobs))
                held = []
            if held:
                with self._published:  # counted before the answers: a flush after them waits for these
                    self._publishing += 1
            self._bound.release((job.party, len(job.body)) for job in jobs)
            for job, answer in zip(jobs, answers):
                job.loop.call_soon_threadsafe(_resolve, job.future, answer)
            if held:
                self._publishes.put(held)

    def _publish(self) -> None:
        """Queue the processing of what the batches stored, in the order they were stored.
        What the broker refused is tried again, oldest first, every RETRY_EVERY seconds
        while newer batches go on, until it is older than the sweeper's grace (the sweeper
        queues it then): messages stored while the broker was away are processed as soon
        as it is back, not half a minute later."""
        failed: list[tuple[float, Callable[[], None]]] = []  # (when stored, its publish), oldest first
        while True:
            try:
                batch = self._publishes.get(timeout=RETRY_EVERY if failed else None)
            except queue.Empty:
                batch = None
            if failed:
                failed = _publish_again(failed)
            for publish in batch or ():
                if not _published(publish, retried=False):
                    failed.append((time.monotonic(), publish))
            if batch is not None:
                with self._published:
                    self._publishing -= 1
                    self._published.notify_all()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until what the batches answered so far stored is queued (tests, shutdown)."""
        with self._published:
            return self._published.wait_for(lambda: self._publishing == 0, timeout)

    def handle(self, jobs: list[_Job]) -> list[Answer]:
        prepared: list[Prepared | Answer] = [_prepare(job) for job in jobs]
        storing = [i for i, p in enumerate(prepared) if isinstance(p, Prepared) and p.messages]
        if storing and (error := _stored([prepared[i] for i in storing])) is not None:
            # Each alone even with the database away: a restart broke the connection the
            # batch had, and the next one may well be a working one.
            if not isinstance(error, DATABASE_DOWN):
                logger.warning("%d webhooks could not be stored together; storing each alone", len(storing))
            for i in storing:
                if (error := _stored([prepared[i]])) is not None:
                    if not isinstance(error, DATABASE_DOWN):
                        logger.warning("a %s webhook could not be stored", jobs[i].channel)
                    prepared[i] = Answer.error(503, "not stored; deliver it again")
        for i, p in enumerate(prepared):
            if isinstance(p, Prepared) and p.undelivered:
                try:
                    undelivered_record(p)
                except DATABASE_DOWN as exc:
                    _database_failures.failed(type(exc).__name__)
                except Exception:
                    logger.exception("a %s webhook's delivery failures could not be recorded", jobs[i].channel)
                else:
                    _database_failures.succeeded()
                    continue
                close_old_connections()
                prepared[i] = Answer.error(503, "not recorded; deliver it again")
        return [p if isinstance(p, Answer) else _OK if p.response is None else Answer.of(p.response)
                for p in prepared]


# Every batch stored while the broker is away fails its publish: one line, not one a batch.
_queue_failures = RepeatedFailure(logger, f"stored webhooks could not be queued for processing; each is tried "
                                          f"again every {RETRY_EVERY:.0f} s")


def _published(publish: Callable[[], None], *, retried: bool) -> bool:
    try:
        publish()
    except Exception as exc:
        if not retried:  # once per publish: its tries again every second are not counted
            _queue_failures.failed(type(exc).__name__)
        return False
    _queue_failures.succeeded()
    return True


def _publish_again(failed: list[tuple[float, Callable[[], None]]]) -> list[tuple[float, Callable[[], None]]]:
    """Try the publishes the broker refused again, oldest first, stopping at the first it
    still refuses; those older than the sweeper's grace are left to it. The ones left."""
    now = time.monotonic()
    left = [(at, publish) for at, publish in failed if now - at < SWEEP_GRACE.total_seconds()]
    if len(left) < len(failed):
        logger.warning("%d stored webhooks' processing is left to the sweeper: the broker is still away",
                       len(failed) - len(left))
    while left:
        if not _published(left[0][1], retried=True):
            return left
        left.pop(0)
    logger.info("stored webhooks the broker had refused are queued for processing")
    return left


# While the database is away (a restart, a failover) every webhook fails the same way, and
# is answered 503 and delivered again, again: one line, not a traceback (or two) each.
_database_failures = RepeatedFailure(logger, "webhooks met the database away; each is answered 503 and "
                                             "delivered again")


def _stored(webhooks: list[Prepared]) -> Exception | None:
    """Store the messages of `webhooks` with one statement, a transaction of its own (no
    BEGIN and COMMIT to wait for: a batch's one round trip to the database): None, or
    what failed (logged), and then nothing of it is stored."""
    try:
        inbound_store(items=[(w.binding, m) for w in webhooks if w.binding for m in w.messages])
    except DATABASE_DOWN as exc:
        _database_failures.failed(type(exc).__name__)
        close_old_connections()  # a broken connection is not reused for the next try
        return exc
    except Exception as exc:
        logger.exception("storing %d webhooks failed", len(webhooks))
        close_old_connections()
        return exc
    _database_failures.succeeded()
    return None


def _prepare(job: _Job) -> Prepared | Answer:
    try:
        request = job.request or ASGIRequest(job.scope, io.BytesIO(job.body))
        request.get_host()  # ALLOWED_HOSTS, as Django's CommonMiddleware checks it on every request
        return webhook_prepare(job.channel, request, verified=job.verified)
    except DisallowedHost:
        return Answer.error(400, "bad Host header")
    except DATABASE_DOWN as exc:  # the binding could not be read: the platform delivers it again
        _database_failures.failed(f"{job.channel}: {type(exc).__name__}")
        connections_drop_broken()
        return Answer.of(database_down_response())
    except Exception:
        logger.exception("a %s webhook could not be read", job.channel)
        return Answer.error(500, "internal error")


def _resolve(future: asyncio.Future[Answer], answer: Answer) -> None:
    if not future.done():  # the client may have gone away meanwhile (its webhook is stored all the same)
        future.set_result(answer)


group_commit = GroupCommit()


class WebhookIngest:
    """ASGI middleware: `POST /v1/webhooks/<channel>` through `group_commit`, the rest to `app`."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        match = PATH.match(app_path(scope)) if scope["type"] == "http" and scope.get("method") == "POST" else None
        if match is None:
            return await self.app(scope, receive, send)
        length = _content_length(scope)
        if not group_commit.admits(length):  # refused before its body is read
            group_commit.refuse()
            answer = _BUSY
        elif (body := await _read_body(receive, settings.QORVEN_MAX_BODY, length)) is None:
            answer = Answer.error(413, f"the body is larger than {settings.QORVEN_MAX_BODY} bytes")
        elif isinstance(screened := _screen(match.group(1), scope, body), Answer):
            answer = screened
        elif (future := group_commit.submit(match.group(1), scope, body, party=screened[1].tenant_id or UNVERIFIED,
                                            request=screened[0], verified=screened[1].verified)) is None:
            answer = _BUSY
        else:
            answer = await future
        await send({"type": "http.response.start", "status": answer.status, "headers": answer.headers})
        await send({"type": "http.response.body", "body": answer.body})


def _screen(channel: str, scope: dict[str, Any], body: bytes) -> Answer | tuple[ASGIRequest, Screened]:
    """A refusal to answer at once, or (the request, what the screening found: whose it
    is, and whether verified). See channels_app.webhooks.webhook_screen."""
    request = ASGIRequest(scope, io.BytesIO(body))
    try:
        request.get_host()
    except DisallowedHost:
        return Answer.error(400, "bad Host header")
    screened = webhook_screen(channel, request)
    return (request, screened) if screened.refusal is None else Answer.of(screened.refusal)


def _content_length(scope: dict[str, Any]) -> int:
    """The body's size its Content-Length gives, 0 without one (or a wrong one)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return max(0, int(value))
            except ValueError:
                return 0
    return 0


async def _read_body(receive: Any, limit: int, length: int) -> bytes | None:
    """The request's body, or None once it is larger than `limit` (read no further);
    `length` is what its Content-Length says."""
    if length > limit:
        return None
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise asyncio.CancelledError  # the client left: nothing to answer
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)
