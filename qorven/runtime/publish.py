"""Queue many tasks at once: one broker round trip instead of one per task.

Celery publishes each `delay()` on its own — on Redis a new client and an LPUSH round
trip each, ~0.8 ms of the publishing process's CPU. kombu's publish batch buffers them in
one pipeline; a transport without batches (the embedded broker) publishes each at once.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


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
