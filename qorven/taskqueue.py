"""In-process task execution for the embedded default (no broker configured).

Tasks queued here run on one daemon thread, strictly in the order they were queued, each
through Celery's own `Task.apply` (so retries and task bodies behave as under a worker).
The queue is not durable: the embedded default trades that for needing no services, and
the work it does (turns, sends) is recoverable from the database.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import close_old_connections

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class _Job:
    task: Any
    args: tuple
    kwargs: dict
    task_id: str
    done: threading.Event = field(default_factory=threading.Event)


class InProcessResult:
    """What `delay()` returns on the embedded default: an id and a way to wait."""

    def __init__(self, job: _Job) -> None:
        self._job = job
        self.id = job.task_id

    def ready(self) -> bool:
        return self._job.done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._job.done.wait(timeout)


class InProcessQueue:
    def __init__(self) -> None:
        self._queue: queue.Queue[_Job] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._outstanding: set[_Job] = set()

    def submit(self, task: Any, args: tuple, kwargs: dict, task_id: str | None = None):
        job = _Job(task=task, args=tuple(args), kwargs=dict(kwargs), task_id=task_id or str(uuid.uuid4()))
        with self._lock:
            self._outstanding.add(job)
        self._ensure_thread()
        self._queue.put(job)
        return InProcessResult(job)

    def join(self, timeout: float = 30.0) -> bool:
        """Wait until every task queued so far, and any they queue, has finished; True if
        that happened within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                outstanding = list(self._outstanding)
            if not outstanding:
                return True
            for job in outstanding:
                if not job.done.wait(max(deadline - time.monotonic(), 0)):
                    return False

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="qorven-tasks", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                close_old_connections()
                result = job.task.apply(args=job.args, kwargs=job.kwargs, task_id=job.task_id)
                if result.failed():
                    logger.error("task %s failed: %r", job.task.name, result.result)
            except Exception:  # a broken task must not stop the queue
                logger.exception("task %s crashed", getattr(job.task, "name", job.task))
            finally:
                close_old_connections()
                with self._lock:
                    self._outstanding.discard(job)
                job.done.set()


inprocess_queue = InProcessQueue()
