"""A turn's lease held while the database is away (a restart, a failover): the keeper
thread (sessions_app.leases) tries to renew it every third of QORVEN_TURN_LEASE and
says so once with the traceback, not once per try; once the database takes connections
again it says so and the lease is renewed. PostgreSQL only: a SQLite file does not go
away."""
from __future__ import annotations

import logging
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from sessions_app.leases import lease_kept
from sessions_app.models import Session
from sessions_app.services.resolve import session_resolve
from sessions_app.turn_writes import turn_lease_acquire

from ..conftest import database_vendor
from ..database_away import database_away
from ..processes import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(database_vendor() != "postgresql", reason="a SQLite file does not go away"),
]

LOGGER = "sessions_app.leases"
BACK = "could not renew turn leases: working again"


def test_a_lease_held_with_the_database_away_logs_one_traceback_and_one_line_when_it_is_back(
    world, settings, caplog
):
    """Before, every renewal with the database away logged "could not renew turn leases"
    with a traceback at ERROR: one every QORVEN_TURN_LEASE / 3 seconds (10) for as long as
    a restart lasted, three a second here."""
    settings.QORVEN_TURN_LEASE = 1  # renewed every third of a second
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    assert turn_lease_acquire(session_id=session.pk, owner="turn-1", seconds=1)

    def tracebacks() -> int:
        return sum(1 for r in caplog.records if r.name == LOGGER and r.exc_info is not None)

    with caplog.at_level(logging.WARNING, logger=LOGGER), lease_kept(session_id=session.pk, owner="turn-1"):
        # A renewal that works first: what an outage of an earlier test left is over.
        Session.objects.filter(pk=session.pk).update(turn_lease_until=timezone.now() + timedelta(hours=1))
        assert wait_for(lambda: Session.objects.filter(
            pk=session.pk, turn_lease_until__lt=timezone.now() + timedelta(minutes=1)).exists(), 60)
        caplog.clear()
        # A renewal waits for a connection as long as the pool waits for one (10 s): here
        # a third of a second, so that several fall due and fail while the database is away.
        pool = connection.pool
        waited, pool.timeout = pool.timeout, 0.3
        try:
            with database_away():
                assert wait_for(lambda: tracebacks() >= 1, 30)  # the keeper tried (its wait under way ended)
                time.sleep(1.5)  # renewals more fall due, each waiting its 0.3 s
        finally:
            pool.timeout = waited
        went_back = timezone.now()
        assert wait_for(lambda: any(r.getMessage().startswith(BACK) for r in caplog.records), 60), (
            [r.getMessage() for r in caplog.records])
        until = Session.objects.values_list("turn_lease_until", flat=True).get(pk=session.pk)
        assert until > went_back  # renewed once the database was back
    lines = [r for r in caplog.records if r.name == LOGGER]
    assert [r.exc_info is not None for r in lines] == [True, False], [r.getMessage() for r in lines]
    assert lines[0].getMessage().startswith("could not renew turn leases")
    back = lines[1].getMessage()
    assert "working again" in back and "(0 more failures)" not in back  # it kept trying while away
