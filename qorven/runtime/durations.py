"""Durations in settings: seconds, or a number with a unit (3600, 30m, 12h, 7d, 2w); 0 is
"none". The one parser: qorven/settings.py refuses a malformed one at startup with it, and
the code that uses one (the retention of images, beat runs and inbound events) reads it
with `duration_setting`. Settings import it: it imports nothing that needs the apps loaded."""
from __future__ import annotations

import re
from datetime import timedelta

_DURATION = re.compile(r"(\d+)\s*([smhdw]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# Longer would take a date out of range when subtracted from today (and means "forever",
# which 0 says).
LONGEST = timedelta(days=36500)


def duration_parse(text: str) -> timedelta | None:
    """`text` as a duration; None for zero or empty. ValueError saying what a duration is
    (worded to follow the setting's name) for anything else."""
    written = str(text or "0").strip().lower()
    match = _DURATION.fullmatch(written)
    seconds = int(match.group(1)) * _UNITS[match.group(2)] if match and len(match.group(1)) <= 12 else None
    if seconds is None or seconds > LONGEST.total_seconds():
        raise ValueError(f"must be a duration like 3600, 30m, 12h, 7d or 2w (at most 100 years), not {text!r}")
    return timedelta(seconds=seconds) if seconds else None


def duration_setting(name: str) -> timedelta | None:
    """The setting `name` as a duration; None for zero or empty. ValueError naming the
    setting when it is not one (settings refuse that at startup; a test may set anything)."""
    from django.conf import settings

    try:
        return duration_parse(getattr(settings, name))
    except ValueError as exc:
        raise ValueError(f"{name} {exc}") from None
