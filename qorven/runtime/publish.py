"""Queue many tasks at once: one broker round trip instead of one per task.

Celery publishes each `delay()` on its own — on Redis a new client and an LPUSH round
trip each, ~0.8 ms of the publishing process's CPU. kombu's publish batch buffers them in
one pipeline; a transport without batches (the embedded broker) publishes each at once.

A publish can also be held (`publishes_held`) by code that answers someone before it
queues the work: the webhooks' storing thread answers the platforms once their messages
are stored and leaves the publishing to a thread of its own (channels_app.webhook_ingest).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

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
