"""The embedded default's Celery worker: a real worker on a thread of this process.

With no broker configured, tasks are published to the in-memory `embedded://` broker
(qorven.runtime.transport) and consumed by a Celery worker running on a thread of the same
process: `qorven serve`, `qorven chat`, a test. It is Celery's own worker, as on the
scale-out layout, so tasks keep Celery's contract everywhere: `countdown`/ETA and
`retry()` wait for real on the worker's timer, several tasks run at once on a small thread
pool (QORVEN_WORKER_CONCURRENCY; a session's turns keep their order through its lease),
and nothing sleeps or polls on a worker thread.

The worker starts with the first task a process publishes (or when `qorven serve` starts
it). What it has been given and not finished is counted, so a caller can wait for the
queue to settle (`join`): tests do, between steps.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
from collections import Counter
from typing import Any

from celery import signals

from .broker_transports import EMBEDDED

logger = logging.getLogger(__name__)


def broker_is_embedded(app: Any) -> bool:
    """Whether `app` publishes to this process's embedded broker."""
    return str(app.conf.broker_url or "").startswith(f"{EMBEDDED}://")


class _Outstanding:
    """Tasks published to the embedded broker and not finished yet, by id (a retry
    publishes the same id again before its first run finishes)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ids: Counter[str] = Counter()
        self._names: dict[str, str] = {}

    def add(self, task_id: str, name: str) -> None:
        with self._cond:
            self._ids[task_id] += 1
            self._names[task_id] = name

    def done(self, task_id: str) -> None:
        with self._cond:
            if self._ids.get(task_id, 0) <= 0:
                return  # run eagerly, or published before a reset
            self._ids[task_id] -= 1
            if not self._ids[task_id]:
                del self._ids[task_id]
                self._names.pop(task_id, None)
            self._cond.notify_all()

    def wait_empty(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._ids, timeout)

    def names(self) -> list[str]:
        with self._cond:
            return sorted(self._names[i] for i in self._ids)

    def clear(self) -> None:
        with self._cond:
            self._ids.clear()
            self._names.clear()
            self._cond.notify_all()


class EmbeddedWorker:
    """One Celery WorkController with a thread pool, on a daemon thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._controller: Any = None
        self._ready = threading.Event()
        self.outstanding = _Outstanding()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def ensure_started(self, *, wait: float = 0.0) -> None:
        """Start the worker unless it runs; with `wait`, until it consumes (seconds)."""
        with self._lock:
            if not self.running:
                self._ready.clear()
                self._thread = threading.Thread(target=self._run, name="qorven-worker", daemon=True)
                self._thread.start()
        if wait:
            self._ready.wait(wait)

    def _run(self) -> None:
        from django.conf import settings

        from celery import current_app

        app = current_app._get_current_object()  # the project's Celery app (qorven.celery)
        worker_cls = _controller_class(app)
        try:
            # Built on this thread: Celery's Django fixup closes the database connections
            # of the thread that builds a worker, which must not be a caller's.
            controller = worker_cls(
                hostname=f"embedded@{socket.gethostname()}.{os.getpid()}",
                pool="threads",
                concurrency=settings.QORVEN_WORKER_CONCURRENCY,
                without_heartbeat=True,
                without_mingle=True,
                without_gossip=True,
                ready_callback=None,
            )
            controller.on_ready = self._ready.set
            self._controller = controller
            controller.start()
        except Exception:
            logger.exception("the embedded worker stopped")
        finally:
            self._controller = None

    def join(self, timeout: float = 30.0) -> bool:
        """Wait until every task published so far, and any they publish (retries and
        countdowns included), has finished; True if that happened within `timeout`."""
        return self.outstanding.wait_empty(timeout)

    def pending(self) -> list[str]:
        """The names of the tasks published and not finished (for a test's report)."""
        return self.outstanding.names()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop consuming and wait for the running tasks (a warm shutdown)."""
        with self._lock:
            controller, thread = self._controller, self._thread
            self._thread = None
        if controller is not None:
            controller.stop(in_sighandler=False)
        if thread is not None:
            thread.join(timeout)

    def reset(self) -> None:
        """Forget everything queued or scheduled: stop the worker, empty its queues. It
        starts again with the next task published. (For tests that left work behind.)"""
        from . import transport

        self.stop()
        transport.purge()
        self.outstanding.clear()


def _controller_class(app: Any) -> type:
    base = app.WorkController

    class Controller(base):  # type: ignore[misc, valid-type]
        on_ready: Any = None

        def on_consumer_ready(self, consumer: Any) -> None:
            super().on_consumer_ready(consumer)
            signals.worker_ready.send(sender=consumer)  # as `celery worker` does
            if self.on_ready is not None:
                self.on_ready()

    return Controller


embedded_worker = EmbeddedWorker()


@signals.before_task_publish.connect(weak=False)
def _on_publish(sender: str | None = None, headers: dict | None = None, **kwargs: Any) -> None:
    from celery import current_app

    app = current_app._get_current_object()  # the project's Celery app (qorven.celery)
    if not broker_is_embedded(app):
        return
    task_id = (headers or {}).get("id")
    if task_id:
        embedded_worker.outstanding.add(task_id, sender or "?")
    embedded_worker.ensure_started()


@signals.task_postrun.connect(weak=False)
def _on_postrun(task_id: str | None = None, task: Any = None, **kwargs: Any) -> None:
    if task_id and not getattr(getattr(task, "request", None), "is_eager", False):
        embedded_worker.outstanding.done(task_id)


@signals.task_revoked.connect(weak=False)
def _on_revoked(request: Any = None, **kwargs: Any) -> None:
    task_id = getattr(request, "id", None)
    if task_id:
        embedded_worker.outstanding.done(task_id)


@signals.task_unknown.connect(weak=False)
@signals.task_rejected.connect(weak=False)
def _on_dropped(message: Any = None, id: str | None = None, **kwargs: Any) -> None:
    task_id = id or (getattr(message, "headers", None) or {}).get("id")
    if task_id:
        embedded_worker.outstanding.done(task_id)

