"""A cache lease (qorven.runtime.cache_leases: the summarizer's one-run-per-session mark)
held while the cache (Redis) is away: its keeper thread tries to renew it every third of
its time, and says so once with the traceback, not once per try; once Redis is back it
says so and the lease is set again. The cache is a Redis server of the test's own,
really stopped."""
from __future__ import annotations

import logging
import time

from django.core.cache import cache

from qorven.runtime.cache_leases import cache_lease

from ..processes import wait_for

LOGGER = "qorven.runtime.cache_leases"
LEASE = 1  # seconds: renewed every third of a second
BACK = "could not renew cache leases: working again"


def _expires_in(key: str) -> int:
    """Seconds the key has left in Redis."""
    return cache._cache.get_client(write=True).ttl(cache.make_and_validate_key(key))


def test_a_lease_held_with_the_cache_away_logs_one_traceback_and_one_line_when_it_is_back(cache_redis, caplog):
    """Before, every renewal with Redis away logged "could not renew cache leases" with a
    traceback: three a second here, one every QORVEN_TURN_LEASE / 3 seconds (10) in a
    summarizer run that outlasted an outage."""
    stop, start = cache_redis
    key = "qorven:test:lease-away"
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        with cache_lease(key, seconds=LEASE) as held:
            assert held
            # A renewal that works first: what an outage of an earlier test left is over.
            cache.touch(key, 3600)
            assert wait_for(lambda: _expires_in(key) <= LEASE, 60)  # renewed for the lease again
            caplog.clear()
            stop()
            time.sleep(LEASE * 2)  # six renewals fall due
            start()  # empty, as a Redis that lost its data
            assert wait_for(lambda: any(r.getMessage().startswith(BACK) for r in caplog.records), 30), (
                [r.getMessage() for r in caplog.records])
            assert wait_for(lambda: cache.get(key) is not None, 30)  # set again: the lease is held
    lines = [r for r in caplog.records if r.getMessage().startswith("could not renew cache leases")]
    assert [r.exc_info is not None for r in lines] == [True, False], [r.getMessage() for r in lines]
    back = lines[1].getMessage()
    assert "working again" in back and "(0 more failures)" not in back  # it kept trying while away
    assert cache.get(key) is None  # let go as the block ended
