"""Durations in settings (qorven.runtime.durations): one parser for startup and for the code that uses them."""
from __future__ import annotations

from datetime import timedelta

import pytest

from qorven.runtime.durations import duration_parse, duration_setting


def test_seconds_or_a_number_with_a_unit_and_zero_is_none():
    assert duration_parse("3600") == timedelta(hours=1)
    assert duration_parse(" 12H ") == timedelta(hours=12)
    assert duration_parse("2w") == timedelta(weeks=2)
    assert duration_parse("0") is None and duration_parse("") is None and duration_parse("0d") is None


@pytest.mark.parametrize("text", ["30days", "1month", "-7d", "7 d x", "36501d", "99999999999999999999999d"])
def test_anything_else_is_refused_saying_what_a_duration_is(text):
    with pytest.raises(ValueError, match=r"must be a duration like 3600, 30m, 12h, 7d or 2w"):
        duration_parse(text)


def test_a_setting_set_wrong_at_run_time_is_refused_by_its_name(settings):
    settings.QORVEN_IMAGE_RETENTION = "soon"
    with pytest.raises(ValueError, match="^QORVEN_IMAGE_RETENTION must be a duration"):
        duration_setting("QORVEN_IMAGE_RETENTION")
