"""The embedded default's tasks keep Celery's contract: they run off the caller's thread,
several at once, a countdown or a retry waits for real, and one task never holds up
another."""
from __future__ import annotations

import threading
import time

import pytest

from qorven.celery import app
from qorven.runtime.worker import embedded_worker

ran: list[tuple[str, float, str]] = []
gate = threading.Event()


@app.task(name="tests.record")
def record(label: str) -> None:
    ran.append((label, time.monotonic(), threading.current_thread().name))


@app.task(name="tests.blocked")
def blocked(label: str) -> None:
    gate.wait(10)
    ran.append((label, time.monotonic(), threading.current_thread().name))


@app.task(bind=True, name="tests.flaky", max_retries=3)
def flaky(self, label: str, delay: float) -> None:
    ran.append((f"{label}#{self.request.retries}", time.monotonic(), threading.current_thread().name))
    if self.request.retries < 2:
        raise self.retry(countdown=delay)


@app.task(name="tests.explode")
def explode() -> None:
    raise RuntimeError("boom")


@pytest.fixture(autouse=True)
def _clean():
    ran.clear()
    gate.clear()
    yield
    gate.set()


def by_label() -> dict[str, float]:
    return {label: at for label, at, _ in ran}


def test_tasks_run_off_the_callers_thread_and_the_caller_returns_at_once():
    started = time.monotonic()
    blocked.delay("slow")
    assert time.monotonic() - started < 0.5
    assert ran == []
    gate.set()
    assert embedded_worker.join(10)
    ((label, _, thread),) = ran
    assert label == "slow" and thread != threading.current_thread().name


def test_a_blocked_task_does_not_hold_up_the_ones_queued_after_it():
    blocked.delay("stuck")
    for i in range(3):
        record.delay(f"quick{i}")
    deadline = time.monotonic() + 10
    while len(ran) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(label for label, _, _ in ran) == ["quick0", "quick1", "quick2"]
    gate.set()
    assert embedded_worker.join(10)
    assert ran[-1][0] == "stuck"


def test_a_countdown_waits_for_real_without_occupying_a_worker():
    queued = time.monotonic()
    record.apply_async(("later",), countdown=1.0)
    record.delay("now")
    assert embedded_worker.join(10)
    times = by_label()
    assert times["now"] - queued < 0.5
    assert times["later"] - queued >= 1.0


def test_retry_comes_back_after_its_countdown_each_time():
    queued = time.monotonic()
    flaky.delay("f", 0.4)
    assert embedded_worker.join(10)
    times = by_label()
    assert list(times) == ["f#0", "f#1", "f#2"]
    assert times["f#1"] - times["f#0"] >= 0.4
    assert times["f#2"] - times["f#1"] >= 0.4
    assert times["f#0"] - queued < 0.5


def test_a_failing_task_does_not_stop_the_worker():
    explode.delay()
    record.delay("after")
    assert embedded_worker.join(10)
    assert [label for label, _, _ in ran] == ["after"]
