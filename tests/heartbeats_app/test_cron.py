"""Cron expressions: validation with reasons, and the ticks around a moment."""
from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from heartbeats_app.cron import CronError, cron_parse, tick_next, tick_previous

UTC = ZoneInfo("UTC")
PARIS = ZoneInfo("Europe/Paris")


@pytest.mark.parametrize(
    "expression, reason",
    [
        ("every morning", "five"),
        ("0 8 * *", "five"),
        ("61 * * * *", "minute"),
        ("0 25 * * *", "hour"),
        ("0 8 32 * *", "day-of-month"),
        ("0 8 * 13 *", "month"),
        ("0 8 * * funday", "day-of-week"),
        ("0 8 30 2 *", "never occurs"),
        ("", "empty"),
        # Celery reads a name by its first three letters: these ran far more often than meant.
        ("0 9 * * MON#1", "day-of-week"),  # "the first Monday": every Monday
        ("0 9 * * satsun", "day-of-week"),  # Saturdays only
        ("0 9 * * monthly", "day-of-week"),  # every Monday
        ("0 9 1 janfeb *", "month"),  # January only
        ("0 mon * * *", "hour"),
        ("0 9 L * *", "day-of-month"),
    ],
)
def test_a_bad_expression_is_rejected_with_the_field_at_fault(expression, reason):
    with pytest.raises(CronError, match=reason):
        cron_parse(expression)


def test_aliases_names_and_sunday_as_seven_are_accepted():
    assert cron_parse("@daily").fields() == cron_parse("0 0 * * *").fields()
    assert cron_parse("0 8 * * mon-fri").schedule().day_of_week == {1, 2, 3, 4, 5}
    assert cron_parse("0 8 * * 7").schedule().day_of_week == {0}
    assert cron_parse("0 8 * * 5-7").schedule().day_of_week == {5, 6, 0}
    assert cron_parse("  0   8 * *  1 ").expression == "0 8 * * 1"
    assert cron_parse("*/15 9-17/2 1,15 JAN-Mar,dec SUN").schedule().month_of_year == {1, 2, 3, 12}
    assert cron_parse("0 9 * * sat,sun").schedule().day_of_week == {6, 0}


@pytest.mark.parametrize("dow, days", [("7-7", {0}), ("5-7/2", {5, 0}), ("1-7/3", {1, 4, 0}), ("0-7/2", {0, 2, 4, 6})])
def test_a_range_ending_on_sunday_as_seven_is_read_with_its_step(dow, days):
    """Classic cron reads these; they were refused naming a field nobody typed ('7-6,0')."""
    assert cron_parse(f"0 8 * * {dow}").schedule().day_of_week == days


def test_the_previous_tick_is_the_latest_scheduled_minute_at_or_before_now():
    weekdays_8 = cron_parse("0 8 * * 1-5").schedule()
    monday_9 = datetime(2026, 11, 30, 9, 15, 42, tzinfo=UTC)  # a Monday
    assert tick_previous(weekdays_8, UTC, monday_9) == datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    monday_7 = datetime(2026, 11, 30, 7, 59, tzinfo=UTC)
    assert tick_previous(weekdays_8, UTC, monday_7) == datetime(2026, 11, 27, 8, 0, tzinfo=UTC)  # Friday
    every_minute = cron_parse("* * * * *").schedule()
    assert tick_previous(every_minute, UTC, monday_9) == datetime(2026, 11, 30, 9, 15, tzinfo=UTC)


def test_ticks_are_computed_in_the_beats_timezone():
    at_8_paris = cron_parse("0 8 * * *").schedule()
    now = datetime(2026, 11, 30, 7, 30, tzinfo=UTC)  # 08:30 in Paris
    assert tick_previous(at_8_paris, PARIS, now) == datetime(2026, 11, 30, 8, 0, tzinfo=PARIS)
    assert tick_next(at_8_paris, PARIS, now) == datetime(2026, 12, 1, 8, 0, tzinfo=PARIS)


def test_the_next_tick_is_strictly_after_the_moment():
    quarter = cron_parse("*/15 * * * *").schedule()
    assert tick_next(quarter, UTC, datetime(2026, 1, 1, 10, 15, tzinfo=UTC)) == datetime(2026, 1, 1, 10, 30, tzinfo=UTC)
    leap = cron_parse("0 0 29 2 *").schedule()
    assert tick_next(leap, UTC, datetime(2026, 3, 1, tzinfo=UTC)) == datetime(2028, 2, 29, tzinfo=UTC)


# The night Paris falls back (2026-10-25): 02:00-02:59 happens twice, first CEST (UTC+2)
# then CET (UTC+1); 03:00 CEST becomes 02:00 CET at 01:00 UTC. (Compared in UTC: a time in
# the repeated hour never equals a time of another zone, by Python's rule.)
def _utc(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 10, 25, hour, minute, tzinfo=UTC)


def test_a_beat_for_every_hour_fires_again_in_the_repeated_hour_of_a_fall_back_night():
    quarter = cron_parse("*/15 * * * *").schedule()
    # 02:05 the second time (01:05 UTC): the last tick is 02:00 of that second pass, not of the first.
    assert tick_previous(quarter, PARIS, _utc(1, 5)).astimezone(UTC) == _utc(1, 0)
    # 02:50 the first time: the next tick is 02:00 again (CET), not 03:00 (an hour and ten minutes on).
    assert tick_next(quarter, PARIS, _utc(0, 50)).astimezone(UTC) == _utc(1, 0)
    assert tick_next(quarter, PARIS, _utc(0, 44)).astimezone(UTC) == _utc(0, 45)
    assert tick_previous(quarter, PARIS, _utc(0, 50)).astimezone(UTC) == _utc(0, 45)
    assert tick_next(quarter, PARIS, _utc(1, 50)).astimezone(UTC) == _utc(2, 0)  # 03:00 CET


def test_a_beat_at_a_named_hour_fires_once_on_a_fall_back_night():
    at_2_30 = cron_parse("30 2 * * *").schedule()
    assert tick_previous(at_2_30, PARIS, _utc(1, 40)).astimezone(UTC) == _utc(0, 30)  # the first 02:30 (CEST)
    assert tick_next(at_2_30, PARIS, _utc(0, 40)).astimezone(UTC) == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)
