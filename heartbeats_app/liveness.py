"""Which `qorven beat` processes are running, for `qorven doctor`: Celery can ask workers
(`inspect().ping()`), but nothing answers for beat. Each beat on the scale-out layout
reports itself in Redis every REPORT_EVERY seconds under a key (of QORVEN_CACHE_PREFIX) that lapses after ALIVE_FOR
and is removed when it stops; there must be exactly one (a second one does no harm to the
runs — each tick runs once — but sends every due heartbeat twice to the broker)."""
from __future__ import annotations

import logging
import os
import socket
import time

from django.conf import settings

from qorven.runtime.repeated_failure import RepeatedFailure

logger = logging.getLogger(__name__)
# Reported on every tick past REPORT_EVERY: Redis away is one line, not one every report.
_report_away = RepeatedFailure(logger, "beat could not report itself alive; the doctor reports it missing "
                                       "meanwhile")

REPORT_EVERY = 10.0
ALIVE_FOR = 30  # seconds: three reports missed and a beat counts as gone


def _key() -> str:
    """Under the cache's prefix: installs sharing a Redis database count only their own beats."""
    return f"{settings.QORVEN_CACHE_PREFIX}:beat-alive:"


def _client():
    import redis

    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)


class BeatReport:
    """This beat's key: `report()` on each scheduler tick, `withdraw()` when it stops."""

    def __init__(self) -> None:
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self._last = 0.0

    def report(self) -> None:
        if not settings.REDIS_URL or time.monotonic() - self._last < REPORT_EVERY:
            return
        self._last = time.monotonic()
        try:
            _client().set(_key() + self.name, str(int(time.time())), ex=ALIVE_FOR)
        except Exception as exc:  # never stops the beat: the doctor reports it missing instead
            _report_away.failed(type(exc).__name__)
        else:
            _report_away.succeeded()

    def withdraw(self) -> None:
        if not settings.REDIS_URL or not self._last:
            return
        try:
            _client().delete(_key() + self.name)
        except Exception as exc:
            logger.warning("beat could not withdraw its report: %s", type(exc).__name__)


def beats_alive() -> list[str]:
    """The beats that reported in the last ALIVE_FOR seconds ("host:pid"), sorted."""
    key = _key()
    names = (found.decode()[len(key):] for found in _client().scan_iter(match=key + "*", count=100))
    return sorted(names)
