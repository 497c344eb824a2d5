"""The beat while the database is away (a restart, a failover): it reads the schedule's
changes on every tick, and says once, with the traceback, that it cannot, not once per
tick; once the database is back it says so. PostgreSQL only: a SQLite file does not go
away."""
from __future__ import annotations

import logging
import time

import pytest

from heartbeats_app.scheduler import EmbeddedBeat

from ..conftest import database_vendor
from ..database_away import database_away
from ..processes import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(database_vendor() != "postgresql", reason="a SQLite file does not go away"),
]

LOGGERS = ("heartbeats_app.scheduler", "django_celery_beat.schedulers")  # ours, and the scheduler's own


def test_a_beat_with_the_database_away_logs_one_traceback_and_one_line_when_it_is_back(world, caplog):
    """Before, django-celery-beat logged "Database gave error" with a traceback at ERROR on
    every tick that found the database away: two in the first half second of a restart
    here, then one every pool wait (10 s) or, with no pool, every tick (0.5 s here, 5 s
    under `qorven serve`, 1 s after a failed tick)."""

    def lines() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name in LOGGERS]

    beat = EmbeddedBeat(max_interval=0.5)
    with caplog.at_level(logging.WARNING):
        beat.start()
        try:
            assert wait_for(lambda: beat.scheduler is not None, 60)
            time.sleep(1)  # a few ticks on the database: what an outage of an earlier test left is over
            caplog.clear()
            with database_away():
                assert wait_for(lambda: any(r.exc_info for r in lines()), 60)  # a tick found it away
                time.sleep(2)  # more ticks fall due
            assert wait_for(lambda: any("working again" in r.getMessage() for r in lines()), 60), (
                [r.getMessage() for r in lines()])
        finally:
            beat.stop()
    said = lines()
    assert [r.exc_info is not None for r in said] == [True, False], [r.getMessage() for r in said]
    assert said[0].name == "heartbeats_app.scheduler"
