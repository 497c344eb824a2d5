"""A failure that repeats itself is logged once, not once per try (qorven.runtime.repeated_failure):
Redis away for ten seconds while a reply streamed wrote two warnings with a traceback per
chunk, hundreds in all."""
from __future__ import annotations

import logging

from qorven.runtime.repeated_failure import RepeatedFailure

logger = logging.getLogger("qorven.tests.repeated")


def test_a_failure_repeated_a_hundred_times_is_one_line_with_its_traceback_and_one_when_it_ends(caplog):
    failures = RepeatedFailure(logger, "could not reach it")
    with caplog.at_level(logging.WARNING, logger=logger.name):
        for i in range(100):
            try:
                raise ConnectionError("gone")
            except ConnectionError:
                failures.failed(f"try {i}")
        failures.succeeded()
        failures.succeeded()
    lines = [(r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert len(lines) == 2
    assert lines[0][0].startswith("could not reach it (try 0)") and lines[0][1]
    assert "working again" in lines[1][0] and "(99 more failures)" in lines[1][0]


def test_a_failure_after_it_ended_is_logged_again(caplog):
    failures = RepeatedFailure(logger, "could not reach it")
    with caplog.at_level(logging.WARNING, logger=logger.name):
        for _ in range(2):
            try:
                raise ConnectionError("gone")
            except ConnectionError:
                failures.failed("x")
            failures.succeeded()
    assert [r.exc_info is not None for r in caplog.records] == [True, False, True, False]
