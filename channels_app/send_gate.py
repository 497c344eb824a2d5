"""How many platform sends run at once, so that a platform that hangs holds little.

A send blocks its worker slot until the platform answers or QORVEN_PLATFORM_TIMEOUT runs
out. Two gates keep one unreachable platform from taking every slot: a binding has one
send in flight at a time, and a worker runs at most QORVEN_SEND_SLOTS sends at once, so
turns, heartbeats and other tenants always have slots left. A reply that finds its
binding busy does not wait on a worker: it stays pending, and the send holding the
binding sends it next if the platform answers fast and the worker has a send slot left
for others, or queues it as it lets go (channels_app.sending.DRAIN_SECONDS).

The gates are keys in Django's cache (Redis on the scale-out layout, this process's
memory on the embedded default), each with an expiry past the longest a send can take,
so a worker killed mid-send does not hold a gate for good.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.core.cache import cache

WAIT = 1.0  # seconds before a send that found no send slot free tries again


class GateShut(Exception):
    """The worker's send slots are all taken: try again shortly."""


class BindingBusy(GateShut):
    """Another send holds the binding; it wakes the next waiting reply as it ends."""


def _hold_seconds() -> int:
    return int(2 * settings.QORVEN_PLATFORM_TIMEOUT) + 10


# This run of the worker: a worker started again on the same host has the same Celery
# host name, and must not find the slots of the one before it (killed mid-send, its keys
# live on until they expire) taken. Set by `qorven worker` before it forks its children,
# which share it: the slots are the worker's, not each child's.
_instance = ""


def worker_instance_start() -> None:
    global _instance
    _instance = uuid.uuid4().hex[:12]


def send_slot_keys(worker: str) -> list[str]:
    return [f"send:worker:{worker}:{_instance}:{slot}" for slot in range(max(settings.QORVEN_SEND_SLOTS, 1))]


def binding_free(*, binding_id: int) -> bool:
    """Whether no send holds the binding now (the sweeper's look for replies nobody woke)."""
    return cache.get(f"send:binding:{binding_id}") is None


def send_slot_free(*, worker: str) -> bool:
    """Whether one of the worker's send slots is free now: a send holding its binding for
    the replies waiting (channels_app.sending) goes on only while others can still send."""
    keys = send_slot_keys(worker)
    return len(cache.get_many(keys)) < len(keys)


@contextmanager
def send_gate(*, binding_id: int, worker: str) -> Iterator[None]:
    """Hold the binding's gate and one of the worker's send slots while sending; raise
    BindingBusy or GateShut at once if either is taken."""
    token = uuid.uuid4().hex
    held: list[str] = []
    try:
        if not cache.add(f"send:binding:{binding_id}", token, _hold_seconds()):
            raise BindingBusy(f"binding {binding_id} is sending")
        held.append(f"send:binding:{binding_id}")
        for key in send_slot_keys(worker):
            if cache.add(key, token, _hold_seconds()):
                held.append(key)
                break
        else:
            raise GateShut(f"worker {worker} has no send slot free")
        yield
    finally:
        if held:  # two round trips for both keys; one not ours any more (expired, taken since) is left
            mine = cache.get_many(held)
            cache.delete_many([key for key in held if mine.get(key) == token])
