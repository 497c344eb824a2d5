"""Collapse several users at once: a few worker threads, each with its own connection."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from django.db import connection

from .owners import ChatOwner

Result = TypeVar("Result")


def run_in_threads(
    owners: Iterable[ChatOwner],
    step: Callable[[ChatOwner, dict[int, Any]], Result],
    *,
    jobs: int,
) -> Iterator[Result]:
    """Run `step(owner, cache)` for every owner on `jobs` threads; yield results as they
    complete. `step` must not raise (it reports failures in its result). At most 2 * jobs
    owners wait in line, so memory stays flat however many there are. When the consumer
    stops early (or is interrupted), the users in progress finish their own transaction
    and no new one starts.
    """
    todo: queue.Queue[ChatOwner | None] = queue.Queue(maxsize=2 * jobs)
    done: queue.Queue[tuple[bool, Any]] = queue.Queue()
    stop = threading.Event()

    def work() -> None:
        cache: dict[int, Any] = {}  # per thread: cached rows are not shared across connections
        try:
            while (owner := todo.get()) is not None:
                if not stop.is_set():
                    done.put((False, step(owner, cache)))
        finally:
            connection.close()  # this thread's own connection
            done.put((True, None))

    threads = [
        threading.Thread(target=work, name=f"collapse-{i}", daemon=True) for i in range(jobs)
    ]
    for thread in threads:
        thread.start()
    running = jobs
    try:
        for owner in owners:
            todo.put(owner)
            while not done.empty():
                finished, result = done.get()
                running -= finished
                if not finished:
                    yield result
        for _ in threads:
            todo.put(None)
        while running:
            finished, result = done.get()
            running -= finished
            if not finished:
                yield result
    finally:
        stop.set()
        if running:
            # Stopped early: drop the queued owners, then wake every worker to leave once
            # its current user (if any) has committed or rolled back.
            try:
                while True:
                    todo.get_nowait()
            except queue.Empty:
                pass
            for _ in range(running):
                todo.put(None)
            while running:
                finished, _ = done.get()
                running -= finished
        for thread in threads:
            thread.join()
