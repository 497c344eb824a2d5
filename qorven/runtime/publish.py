"""Queue many tasks at once: one broker round trip instead of one per task.

Celery publishes each `delay()` on its own — on Redis a new client and an LPUSH round
trip each, ~0.8 ms of the publishing process's CPU. kombu's publish batch buffers them in
one pipeline; a transport without batches (the embedded broker) publishes each at once.

A publish can also be held (`publishes_held`) by code that answers someone before it
queues the work: the webhooks' storing thread answers the platforms once their messages
are stored and leaves the publishing to a thread of its own (channels_app.webhook_ingest).

A task the broker refused (Redis away, restarting) for work that is stored can be handed
to `publish_again_later`: tried again every second, so the work is queued as soon as the
broker is back instead of when the sweeper (channels_app.sweep) finds it.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

logger = logging.getLogger(__name__)

_held: ContextVar[list[Callable[[], None]] | None] = ContextVar("qorven_publishes_held", default=None)


def publish_or_hold(publish: Callable[[], None]) -> None:
    """Make `publish` now or, inside `publishes_held()`, leave it to the block's owner."""
    held = _held.get()
    if held is None:
        publish()
    else:
        held.append(publish)


@contextmanager
def publishes_held() -> Iterator[list[Callable[[], None]]]:
    """The publishes asked for inside the block, collected for the caller to make (each
    may raise: the caller logs it; what it would have queued is stored, and the sweeper
    queues it again)."""
    held: list[Callable[[], None]] = []
    token = _held.set(held)
    try:
        yield held
    finally:
        _held.reset(token)


def tasks_publish(task: Any, calls: Iterable[Sequence[Any]]) -> None:
    """`task.delay(*args)` for each of `calls`, sent together."""
    calls = list(calls)
    if not calls:
        return
    if len(calls) == 1 or task.app.conf.task_always_eager:
        for args in calls:
            task.delay(*args)
        return
    with task.app.producer_or_acquire() as producer, producer.batch():
        for args in calls:
            task.apply_async(tuple(args), producer=producer)


RETRY_EVERY = 1.0  # seconds between tries of the publishes a broker refused
# Tried for this long, then left to the sweeper, which queues whatever is stored and still
# waiting once it is older than its grace (channels_app.sweep.GRACE, the same 30 s).
RETRY_FOR = 30.0
MAX_WAITING = 10_000  # refused publishes kept to try again, at most (the rest: the sweeper's)


class _PublishAgain:
    """A thread of the process's own, started when a publish is refused and ending when
    none is left, that tries the refused publishes again, oldest first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: deque[tuple[float, Callable[[], None]]] = deque()
        self._thread: threading.Thread | None = None

    def add(self, publish: Callable[[], None]) -> None:
        with self._lock:
            if len(self._waiting) >= MAX_WAITING:
                return
            self._waiting.append((time.monotonic(), publish))
            if self._thread is None or not self._thread.is_alive():  # none yet, or not in this (forked) process
                self._thread = threading.Thread(target=self._run, name="qorven-publish-again", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(RETRY_EVERY)
            queued, done = 0, False
            while True:
                with self._lock:
                    while self._waiting and time.monotonic() - self._waiting[0][0] > RETRY_FOR:
                        self._waiting.popleft()  # the sweeper's now
                    if not self._waiting:
                        self._thread, done = None, True  # one refused from now on starts another
                        break
                    publish = self._waiting[0][1]
                try:
                    publish()
                except Exception:
                    break  # still away: the rest waits behind the oldest
                with self._lock:
                    if self._waiting and self._waiting[0][1] is publish:
                        self._waiting.popleft()
                queued += 1
            if queued:
                logger.info("%d task(s) a broker had refused are queued", queued)
            if done:
                return


_publish_again = _PublishAgain()


def publish_again_later(task: Any, args: Sequence[Any], kwargs: dict[str, Any] | None = None, *,
                        countdown: float = 0.0) -> None:
    """`task.delay(*args, **kwargs)` — or, with `countdown`, due that many seconds from
    now — which the broker refused, tried again every RETRY_EVERY seconds until it goes
    through (due when it was, or at once if that time has passed) or is RETRY_FOR seconds
    old (the sweeper queues it then). Given up if the process is pointed at another broker
    meanwhile. For work that is stored: queuing it twice is harmless (every task is safe to
    run twice)."""
    refused_by = task.app.connection_for_write().as_uri()
    due = time.monotonic() + countdown

    def publish() -> None:
        if task.app.connection_for_write().as_uri() != refused_by:
            return
        left = due - time.monotonic()
        if left > 0:
            task.apply_async(tuple(args), kwargs, countdown=left)
        else:
            task.delay(*args, **(kwargs or {}))

    _publish_again.add(publish)
