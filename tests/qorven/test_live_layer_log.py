"""The pub/sub live layer (channels_redis' RedisPubSubChannelLayer, the default) with its
Redis away: the library's receive loop tries again every second and logs each failure
with a traceback. The log says so once with the traceback, then a line a minute, as
Qorven's own repeated failures do (qorven.runtime.repeated_failure)."""
from __future__ import annotations

import asyncio
import logging
import shutil

import pytest
from channels_redis.pubsub import RedisPubSubChannelLayer

from qorven.runtime.live_redis import live_redis_host

from ..processes import redis_of_our_own

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")

LOGGER = "channels_redis.pubsub"
AWAY = 3.5  # seconds: the receive loop fails about once a second meanwhile


def test_the_layers_receive_loop_with_redis_away_logs_one_traceback(caplog):
    """Before, one warning with a full traceback a second for as long as Redis was away
    (three or four here), in every server process."""
    from qorven.runtime.log_context import RepeatsFilter

    port, redis = redis_of_our_own()
    layer = RedisPubSubChannelLayer(hosts=[live_redis_host(f"redis://127.0.0.1:{port}/0", 0.5)])

    async def away_a_while() -> None:
        channel = await layer.new_channel()
        await layer.group_add("chat.1", channel)  # the receive loop runs from here on
        redis.terminate()
        redis.wait(10)
        await asyncio.sleep(AWAY)
        await layer.flush()

    library = logging.getLogger(LOGGER)
    configured = [f for f in library.filters if isinstance(f, RepeatsFilter)]
    # The settings' LOGGING puts it there (once more each time logging is set up again).
    assert configured, library.filters
    fresh = RepeatsFilter()  # as the settings make it, with no failure of an earlier test in mind
    for each in configured:
        library.removeFilter(each)
    library.addFilter(fresh)
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            asyncio.run(away_a_while())
    finally:
        library.removeFilter(fresh)
        for each in configured:
            library.addFilter(each)
    shown = [r for r in caplog.records if r.name == LOGGER]
    assert [r.exc_info is not None for r in shown] == [True], [r.getMessage() for r in shown]
    assert fresh.counted >= 2  # the loop did fail again and again meanwhile
