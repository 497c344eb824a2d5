from __future__ import annotations

import threading

import pytest

from qorven.celery import app
from qorven.taskqueue import inprocess_queue

ran: list[tuple[int, str]] = []
gate = threading.Event()


@app.task(name="tests.record")
def record(i: int) -> None:
    gate.wait(10)
    ran.append((i, threading.current_thread().name))


@pytest.fixture
def inprocess(settings):
    settings.QORVEN_INPROCESS_TASKS = True
    ran.clear()
    gate.clear()
    yield
    gate.set()
    inprocess_queue.join(10)


def test_embedded_tasks_run_off_the_callers_thread_in_queue_order(inprocess):
    results = [record.delay(i) for i in range(5)]
    # The caller got control back while the first task is still blocked on the gate.
    assert not any(r.ready() for r in results)
    assert ran == []
    gate.set()
    assert inprocess_queue.join(10)
    assert [i for i, _ in ran] == [0, 1, 2, 3, 4]
    assert {name for _, name in ran} == {"qorven-tasks"}
    assert all(r.ready() for r in results)


def test_a_failing_task_does_not_stop_the_queue(inprocess):
    @app.task(name="tests.explode")
    def explode() -> None:
        raise RuntimeError("boom")

    gate.set()
    explode.delay()
    record.delay(7)
    assert inprocess_queue.join(10)
    assert [i for i, _ in ran] == [7]
