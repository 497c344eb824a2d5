"""The embedded default's broker: kombu's in-memory transport that wakes its consumer.

kombu's `memory://` transport is a virtual transport: an idle consumer sleeps
`polling_interval` between empty polls (a second by default), so every task would wait up
to that long, or the process would spin with a short interval. Here every put, ack and
reject bumps a generation counter under a condition, and a consumer with nothing to take
waits on it: a task starts the moment it is queued, or a worker slot frees, and an idle
worker costs nothing. Everything else (queues, exchanges, QoS, acks) is kombu's own.

The queues live in this process only: the embedded default trades durability for needing
no services. Work lost with the process is found again in the database by the sweeper.
"""
from __future__ import annotations

import socket
import threading
from collections import defaultdict
from queue import Empty
from time import monotonic

from kombu.transport import memory, virtual

from .broker_transports import EMBEDDED as ALIAS

_MAX_WAIT = 1.0  # seconds: a safety net; every state change wakes the consumer anyway


class _Arrivals:
    """A generation counter a consumer waits on for any change worth a new poll."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.generation = 0

    def bump(self) -> None:
        with self._cond:
            self.generation += 1
            self._cond.notify_all()

    def wait_past(self, seen: int, timeout: float) -> None:
        with self._cond:
            if self.generation == seen:
                self._cond.wait(timeout)


arrivals = _Arrivals()


class Channel(memory.Channel):
    # This broker's own queues, apart from any plain memory:// broker in the process.
    queues: dict = {}
    events = defaultdict(set)

    def _put(self, queue, message, **kwargs):
        super()._put(queue, message, **kwargs)
        arrivals.bump()

    def _put_fanout(self, exchange, message, routing_key=None, **kwargs):
        super()._put_fanout(exchange, message, routing_key, **kwargs)
        arrivals.bump()

    def basic_ack(self, delivery_tag, multiple=False):
        super().basic_ack(delivery_tag, multiple)
        arrivals.bump()  # a prefetch slot is free: the consumer may take the next message

    def basic_reject(self, delivery_tag, requeue=False):
        super().basic_reject(delivery_tag, requeue)
        arrivals.bump()


class Transport(memory.Transport):
    Channel = Channel
    global_state = virtual.BrokerState()
    driver_type = driver_name = ALIAS

    def drain_events(self, connection, timeout=None):
        started = monotonic()
        while True:
            seen = arrivals.generation
            try:
                self.cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                pass
            waited = monotonic() - started
            if timeout is not None and waited >= timeout:
                raise socket.timeout()
            remaining = _MAX_WAIT if timeout is None else min(timeout - waited, _MAX_WAIT)
            arrivals.wait_past(seen, remaining)


def queued() -> int:
    """Messages waiting in this process's queues (not yet taken by the worker)."""
    return sum(q.qsize() for q in list(Channel.queues.values()))


def purge() -> int:
    """Drop every message waiting in this process's queues; how many went."""
    dropped = 0
    for q in list(Channel.queues.values()):
        with q.mutex:
            dropped += len(q.queue)
            q.queue.clear()
    return dropped
