"""`cache_or` (qorven.runtime.cache_away): what a cache call answers, or the caller's
default while the cache is away, said once in the caller's own log."""
from __future__ import annotations

import logging

import pytest

from qorven.runtime.cache_away import cache_or
from qorven.runtime.repeated_failure import RepeatedFailure

logger = logging.getLogger("qorven.tests.cache_or")


def _away() -> bool:
    raise ConnectionError("Error 111 connecting to 127.0.0.1:6390. Connection refused.")


def test_the_default_while_the_cache_is_away_logged_once_and_its_answer_when_back(caplog):
    away = RepeatedFailure(logger, "marks cannot be kept")
    with caplog.at_level(logging.WARNING, logger=logger.name):
        answers = [cache_or(True, _away, away=away) for _ in range(5)]
        back = cache_or(True, lambda: False, away=away)  # a mark already set: not due
    assert answers == [True] * 5
    assert back is False  # a falsy answer is the cache's, not replaced by the default
    lines = [(r.name, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert lines[0] == (logger.name, "marks cannot be kept (ConnectionError); the same failure again is "
                                     "counted, not logged", True)
    assert len(lines) == 2 and "working again" in lines[1][1] and "(4 more failures)" in lines[1][1]


def test_an_interrupt_is_not_taken_for_the_cache_away(caplog):
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cache_or(None, interrupted, away=RepeatedFailure(logger, "marks cannot be kept"))
    assert not caplog.records
