"""A beat reporting itself alive (heartbeats_app.liveness, for `qorven doctor`) on every
tick while Redis is away: it says once, with the traceback, that it cannot, then a line
a minute; once Redis is back it says so and the report is there again. The cache is a
Redis server of the test's own, really stopped."""
from __future__ import annotations

import logging

from heartbeats_app import liveness
from heartbeats_app.liveness import BeatReport, beats_alive

LOGGER = "heartbeats_app.liveness"


def test_a_beat_reporting_with_redis_away_logs_one_traceback_and_one_line_when_it_is_back(
    cache_redis, monkeypatch, caplog
):
    """Before, each report with Redis away logged a warning: one every REPORT_EVERY (10 s)
    for as long as the outage lasted, five here."""
    monkeypatch.setattr(liveness, "REPORT_EVERY", 0.0)  # a report on every tick
    stop, start = cache_redis
    report = BeatReport()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        stop()
        for _ in range(5):
            report.report()  # a tick each
        start()
        report.report()
    lines = [r for r in caplog.records if r.name == LOGGER]
    assert [r.exc_info is not None for r in lines] == [True, False], [r.getMessage() for r in lines]
    assert lines[0].getMessage().startswith("beat could not report itself alive")
    assert "working again" in lines[1].getMessage() and "(4 more failures)" in lines[1].getMessage()
    assert beats_alive() == [report.name]
