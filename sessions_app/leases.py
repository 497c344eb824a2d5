"""A turn's hold on its session: short, renewed while the turn runs, gone with its process.

A turn (or a compaction) takes its session's lease for QORVEN_TURN_LEASE seconds
(`turn_lease_acquire`). While it holds it, one keeper thread per process renews every
lease held in the process every third of that time, in one UPDATE each. A worker killed
outright stops renewing, so its sessions are free again within QORVEN_TURN_LEASE seconds
and the sweeper (or the next message) answers what it left, instead of waiting for the
broker to redeliver the task half an hour later. A turn that finds its lease gone (a
stall longer than the lease: another turn may hold the session now) stops before it
writes anything (`LeaseLost`, from `turn_lease_confirm`).
"""
from __future__ import annotations

import logging
import threading
from types import TracebackType

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from qorven.runtime.repeated_failure import RepeatedFailure

from .errors import LeaseLost
from .models import Session
from .turn_writes import turn_leases_renew

__all__ = ["LeaseLost", "lease_held", "lease_kept"]

logger = logging.getLogger(__name__)
# The keeper tries every third of a lease while the database is away: one line, not one a try.
_renew_failures = RepeatedFailure(logger, "could not renew turn leases")


class _Keeper:
    """Renews the leases this process holds, on one daemon thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}  # owner → session id
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, owner: str, session_id: int) -> None:
        with self._lock:
            self._held[owner] = session_id
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="qorven-leases", daemon=True)
                self._thread.start()

    def drop(self, owner: str) -> None:
        with self._lock:
            self._held.pop(owner, None)

    def held(self) -> dict[str, int]:
        with self._lock:
            return dict(self._held)

    def renew(self, held: dict[str, int]) -> None:
        """Renew the leases `held` (a copy taken a moment before); report those found gone
        that are still held: a turn drops its lease from here before it lets go of it
        (`lease_kept.letting_go`), so one let go meanwhile is not a lease lost."""
        lost = turn_leases_renew(held=held, seconds=settings.QORVEN_TURN_LEASE)
        with self._lock:
            lost = [owner for owner in lost if self._held.get(owner) == held[owner]]
        for owner in lost:
            logger.warning("the lease %s on session %s ran out before it was renewed", owner, held[owner])

    def _run(self) -> None:
        while True:
            self._wake.wait(max(settings.QORVEN_TURN_LEASE / 3, 0.1))
            held = self.held()
            if not held:
                continue
            try:
                self.renew(held)
            except Exception as exc:
                _renew_failures.failed(type(exc).__name__)
            else:
                _renew_failures.succeeded()
            finally:
                close_old_connections()
                connection.close()  # renewals are seconds apart: hold no connection between them


_keeper = _Keeper()


class lease_kept:
    """`with lease_kept(session_id=…, owner=…):` renews the lease while the block runs.
    `move(session_id)` follows the turn to a successor session."""

    def __init__(self, *, session_id: int, owner: str) -> None:
        self.session_id = session_id
        self.owner = owner

    def __enter__(self) -> lease_kept:
        _keeper.hold(self.owner, self.session_id)
        return self

    def move(self, session_id: int) -> None:
        self.session_id = session_id
        _keeper.hold(self.owner, session_id)

    def letting_go(self) -> None:
        """The turn is about to let go of its lease: stop renewing it (`holding` again if
        it did not)."""
        _keeper.drop(self.owner)

    def holding(self) -> None:
        _keeper.hold(self.owner, self.session_id)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _keeper.drop(self.owner)


def lease_held(*, session: Session) -> bool:
    """Whether something (a turn, a compaction) holds the session's lease now, read from
    the database. What a turn left behind (the text of a reply it was writing) tells of
    a turn under way only while this holds: a turn's worker that died stops renewing,
    and its lease runs out within QORVEN_TURN_LEASE seconds."""
    return Session.objects.filter(
        pk=session.pk, tenant_id=session.tenant_id, turn_lease_until__gte=timezone.now()
    ).exclude(turn_owner="").exists()
