"""How many platform sends run at once, so that a platform that hangs holds little.

A send blocks its worker slot until the platform answers or QORVEN_PLATFORM_TIMEOUT runs
out. Two gates keep one unreachable platform from taking every slot: a binding has one
send in flight at a time (its replies go out in order), and a worker runs at most
QORVEN_SEND_SLOTS sends at once, so turns, heartbeats and other tenants always have slots
left. A reply that finds its binding busy does not wait on a worker: it stays pending,
and the send holding the binding sends it next if the platform answers fast and the
worker has a send slot left for others, or queues it as it lets go
(channels_app.sending.DRAIN_SECONDS).

Where the gates live:
- On PostgreSQL (unless QORVEN_SEND_GATES=cache) they are advisory locks, held by the
  sending process's database connection: no Redis is asked, so a reply finished while
  Redis is down still goes out at once, and a worker killed mid-send lets go of its
  gates the moment its connection closes (the sweeper can then tell its cut-off part
  from a send still under way).
- Elsewhere (SQLite: one process on the embedded default; PostgreSQL behind a pooler in
  transaction mode) they are keys in Django's cache, each with an expiry past the
  longest one platform call can take, so a send that never let go holds them no longer
  than that. A reply of many parts holds them longer than one call: their expiry is
  renewed as each part is claimed (`GatesHeld.renew`), so the sweeper never finds the gate
  of a send still under way free.

Every claim of a part to send (pending → sending) happens under its binding's gate, so a
part found `sending` while its binding's gate is free was left by a sender that died
(`binding_taken`).
"""
from __future__ import annotations

import logging
import threading
import uuid
import zlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from django.conf import settings
from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

logger = logging.getLogger(__name__)

WAIT = 1.0  # seconds before a send that found no send slot free tries again


class GateShut(Exception):
    """The worker's send slots are all taken: try again shortly."""


class BindingBusy(GateShut):
    """Another send holds the binding; it wakes the next waiting reply as it ends."""


HOLD_MARGIN = 10  # seconds a cache gate's expiry lasts past two platform calls


def _hold_seconds() -> int:
    return int(2 * settings.QORVEN_PLATFORM_TIMEOUT) + HOLD_MARGIN


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


def binding_key(binding_id: int) -> str:
    return f"send:binding:{binding_id}"


# Advisory lock keys: (class, key) pairs of int4, a class for each kind of gate; a
# slot's name is folded into 31 bits (two names sharing a key only share a slot).
_CLASS = {"binding": 0x51_53_42, "worker": 0x51_53_57}


def _lock_key(key: str) -> tuple[int, int]:
    kind, _, rest = key.removeprefix("send:").partition(":")
    return _CLASS[kind], (int(rest) if kind == "binding" else zlib.crc32(rest.encode())) & 0x7FFFFFFF


# Set on the connection with every gate it takes (the same statement): a host that
# vanishes without closing its connections (power lost, network cut) holds its gates only
# until PostgreSQL finds the connection dead — probes after 30 s idle, every 10 s, 3
# missed: about a minute, not the system's default two hours.
_KEEPALIVE = (", set_config('tcp_keepalives_idle', '30', false), set_config('tcp_keepalives_interval', '10', false),"
              " set_config('tcp_keepalives_count', '3', false)")


class _DatabaseGates:
    """PostgreSQL advisory locks on this thread's connection. A lock is held by the
    connection, so one this process holds is also noted here: the same connection would
    be granted it twice."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[str] = set()

    def take(self, key: str) -> str | None:
        with self._lock:
            if key in self._held:
                return None
            self._held.add(key)
        try:
            with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
                cursor.execute("SELECT pg_try_advisory_lock(%s, %s)" + _KEEPALIVE, _lock_key(key))
                taken = cursor.fetchone()[0]
        except BaseException:
            self._forget(key)
            raise
        if not taken:
            self._forget(key)
            return None
        return key

    def take_both(self, first: str, then: str) -> tuple[str | None, str | None]:
        """`first`, and `then` only if `first` was free, in one statement (a send's binding
        and its first slot: one round trip where two were)."""
        with self._lock:
            if first in self._held:
                return None, None
            mine_too = then not in self._held
            self._held.update((first, then) if mine_too else (first,))
        try:
            with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
                # CASE runs the second try only when the first was granted.
                cursor.execute(
                    "SELECT got, CASE WHEN got AND %s THEN pg_try_advisory_lock(%s, %s) END FROM"
                    " (SELECT pg_try_advisory_lock(%s, %s)" + _KEEPALIVE + ") AS taken(got)",
                    [mine_too, *_lock_key(then), *_lock_key(first)],
                )
                got_first, got_then = cursor.fetchone()[:2]
        except BaseException:
            self._forget(first)
            if mine_too:
                self._forget(then)
            raise
        if not got_first:
            self._forget(first)
        if not (mine_too and got_then):
            if mine_too:
                self._forget(then)
        return (first if got_first else None), (then if mine_too and got_then else None)

    def let_go(self, held: list[tuple[str, str]]) -> None:
        if not held:
            return
        conn = connections[DEFAULT_DB_ALIAS]
        try:
            if conn.connection is not None:  # closed since (a lost connection): the locks went with it
                with conn.cursor() as cursor:
                    cursor.execute("SELECT " + ", ".join(["pg_advisory_unlock(%s, %s)"] * len(held)),
                                   [part for key, _ in held for part in _lock_key(key)])
        except DatabaseError:
            # A lock that could not be let go would hold its bot for as long as this
            # connection lives: it goes with the connection instead.
            logger.warning("could not let go of send gates %s; closing the connection that holds them",
                           [key for key, _ in held], exc_info=True)
            conn.close()
        finally:
            for key, _ in held:
                self._forget(key)

    def free_count(self, keys: list[str]) -> int:
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            pairs = [_lock_key(key) for key in keys]
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " AND (classid, objid) IN (" + ", ".join(["(%s::oid, %s::oid)"] * len(pairs)) + ")",
                [part for pair in pairs for part in pair],
            )
            return len(keys) - cursor.fetchone()[0]

    def _forget(self, key: str) -> None:
        with self._lock:
            self._held.discard(key)


class _CacheGates:
    """Keys in Django's cache, each with an expiry past the longest a send can take."""

    def take(self, key: str) -> str | None:
        token = uuid.uuid4().hex
        return token if cache.add(key, token, _hold_seconds()) else None

    def renew(self, held: list[tuple[str, str]]) -> bool:
        """Each key's expiry from now on, if all are still ours (an expiry already past,
        and the key taken since, is not)."""
        if not held:
            return True
        mine = cache.get_many([key for key, _ in held])
        if any(mine.get(key) != token for key, token in held):
            return False
        return all(cache.touch(key, _hold_seconds()) for key, _ in held)

    def let_go(self, held: list[tuple[str, str]]) -> None:
        if held:  # two round trips for all keys; one not ours any more (expired, taken since) is left
            mine = cache.get_many([key for key, _ in held])
            cache.delete_many([key for key, token in held if mine.get(key) == token])

    def free_count(self, keys: list[str]) -> int:
        return len(keys) - len(cache.get_many(keys))


_database_gates, _cache_gates = _DatabaseGates(), _CacheGates()


def _gates() -> _DatabaseGates | _CacheGates:
    if connections[DEFAULT_DB_ALIAS].vendor == "postgresql" and settings.QORVEN_SEND_GATES == "database":
        return _database_gates
    return _cache_gates


def send_slot_free(*, worker: str) -> bool:
    """Whether one of the worker's send slots is free now: a send holding its binding for
    the replies waiting (channels_app.sending) goes on only while others can still send."""
    return _gates().free_count(send_slot_keys(worker)) > 0


def binding_free(*, binding_id: int) -> bool:
    """Whether no send holds the binding now (the sweeper's look for replies nobody woke)."""
    return _gates().free_count([binding_key(binding_id)]) > 0


@contextmanager
def gates_held(keys: list[str]) -> Iterator[bool]:
    """Hold the gates named `keys` (`send_slot_keys`, `binding_key`) for the block if all
    are free; yields whether they were (holding none when one was not)."""
    gates = _gates()
    held: list[tuple[str, str]] = []
    try:
        for key in keys:
            token = gates.take(key)
            if token is None:
                break
            held.append((key, token))
        if len(held) < len(keys):
            gates.let_go(held)
            held = []
        yield bool(held) or not keys
    finally:
        gates.let_go(held)


def binding_taken(*, binding_id: int) -> AbstractContextManager[bool]:
    """Hold the binding's gate for the block if no send holds it (yields whether it was
    free): while it is held nothing is claimed for sending on that binding, so a part
    found `sending` then was left by a sender that died."""
    return gates_held([binding_key(binding_id)])


class GatesHeld:
    """The gates a send holds (send_gate)."""

    def __init__(self, gates: _DatabaseGates | _CacheGates, held: list[tuple[str, str]]) -> None:
        self._gates, self._held = gates, held

    def renew(self) -> bool:
        """Before each part is claimed: whether the gates are still this send's, their
        expiry renewed. A send whose gates were taken over (it stalled past their expiry)
        claims nothing more; the new holder sends the rest. A database connection holds
        its locks for as long as it lives: nothing to renew."""
        return not isinstance(self._gates, _CacheGates) or self._gates.renew(self._held)


@contextmanager
def send_gate(*, binding_id: int, worker: str) -> Iterator[GatesHeld]:
    """Hold the binding's gate and one of the worker's send slots while sending; raise
    BindingBusy or GateShut at once if either is taken."""
    gates = _gates()
    binding, slots = binding_key(binding_id), send_slot_keys(worker)
    held: list[tuple[str, str]] = []
    try:
        if isinstance(gates, _DatabaseGates):  # the binding and the first slot in one round trip
            token, slot = gates.take_both(binding, slots[0])
            first, slots = slots[0], slots[1:]
        else:
            token, slot, first = gates.take(binding), None, ""
        if token is None:
            raise BindingBusy(f"binding {binding_id} is sending")
        held.append((binding, token))
        if slot is not None:
            held.append((first, slot))
        else:
            for key in slots:
                slot = gates.take(key)
                if slot is not None:
                    held.append((key, slot))
                    break
            else:
                raise GateShut(f"worker {worker} has no send slot free")
        yield GatesHeld(gates, held)
    finally:
        gates.let_go(held)
