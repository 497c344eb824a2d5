"""Whether a time has a date in every timezone.

Times are stored in UTC and shown in each person's own timezone (/memories, the export,
the admin, a reminder's due time). A time within hours of the first or last instant a
Python datetime holds (0001-01-01, 9999-12-31) is storable, and then has no date east or
west of UTC: showing it raised OverflowError. Times a person or a model gives are held to
a day inside those bounds, as no timezone is further than that from UTC.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

EARLIEST = datetime.min.replace(tzinfo=UTC) + timedelta(days=1)
LATEST = datetime.max.replace(tzinfo=UTC) - timedelta(days=1)


def dated_everywhere(moment: datetime) -> bool:
    """Whether the aware datetime `moment` can be shown in any timezone (and stored)."""
    try:
        return EARLIEST <= moment.astimezone(UTC) <= LATEST
    except OverflowError:  # not even in UTC
        return False
