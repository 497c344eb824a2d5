"""The Stop flag's cache unreachable (Redis away) while a reply streams: the turn goes on
(qorven.agent.stop). It raised the cache's connection error between two tokens, and
the reply being written was given up and asked of the model again once the sweeper
found its message, half a minute later."""
from __future__ import annotations

import pytest
from django.core.cache import caches

from qorven.agent.stop import StopWatch, turn_stop_request

from ..ports import free_port


@pytest.fixture
def unreachable_cache(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}}
    yield
    caches["default"].close()


def test_a_turn_looking_for_a_stop_request_while_redis_is_away_goes_on(unreachable_cache):
    watch = StopWatch(session_id=1, reply_to=2)
    watch.check()  # no TurnStopped, no connection error


def test_a_stop_request_is_still_noticed_when_the_cache_answers(settings):
    from qorven.agent.stop import TurnStopped

    turn_stop_request(session_id=3, reply_to=4)
    with pytest.raises(TurnStopped):
        StopWatch(session_id=3, reply_to=4).check()
