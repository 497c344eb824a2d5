"""Cron expressions of heartbeats: validation, and the ticks around a moment.

A beat's schedule is a classic five-field expression (minute hour day-of-month month
day-of-week) or one of the aliases @hourly, @daily, @weekly, @monthly, @yearly. It is
parsed with Celery's own crontab parser, because Celery beat is what runs it; that means
Celery's semantics too: a day must match *both* day-of-month and day-of-week when both are
restricted (classic cron matches either). Day-of-week 0 and 7 are Sunday; names work
(mon-fri, jan). A range runs upwards, as classic cron has it: '23-2' is refused naming
its field (Celery's parser would wrap it past midnight), and the wrap is written as two
ranges, '23,0-2'.

When the clocks change, a beat that names its hours keeps to the wall clock: it runs
once at its first 02:30 of a night that falls back, and at the first moment after the
02:30 a night that springs forward skips. A beat for every hour (`*/15 * * * *`,
`@hourly`) keeps its pace in real time: it runs in the repeated hour too (as classic
cron does with such jobs; Celery's wall-clock arithmetic alone leaves that hour silent).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery.schedules import crontab

from qorven.runtime.zone_names import zone_choosable
from tenancy.zero_width import zero_width_dropped

ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
FIELDS = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
_LABELS = {"minute": "minute", "hour": "hour", "day_of_month": "day-of-month",
           "month_of_year": "month", "day_of_week": "day-of-week"}
# What the columns an expression is stored in take: a beat's `cron`, and each field's in
# django-celery-beat's CrontabSchedule (not imported: the settings parse a cron before the
# apps are loaded; tests/heartbeats_app/test_services.py holds these to the models).
EXPRESSION_MAX = 100
FIELD_MAX = {"minute": 240, "hour": 96, "day_of_month": 124, "month_of_year": 64, "day_of_week": 64}
# Long enough to find Feb 29 falling on a given weekday (a 28-year cycle).
_LOOKAHEAD_DAYS = 366 * 29
# Longer than any clock change there is (Troll's is two hours).
CLOCK_CHANGE_WINDOW = timedelta(hours=3)
_MINUTE = timedelta(minutes=1)


class CronError(ValueError):
    """A cron expression or timezone that cannot be scheduled; the message says why."""


@dataclass(frozen=True)
class Cron:
    """A validated schedule: the five normalised fields and the expanded sets."""

    expression: str
    minute: str
    hour: str
    day_of_month: str
    month_of_year: str
    day_of_week: str

    def fields(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in FIELDS}

    def schedule(self) -> crontab:
        return crontab(**self.fields())


def cron_normalised(expression: str) -> str:
    """`expression` as it is saved: its fields one space apart, without the zero-width
    spaces a copy of our formatting may carry. Two texts of the same expression (an old
    beat's, saved with other spacing) are equal once normalised."""
    return " ".join(zero_width_dropped(expression).split())


def cron_same(expression: object, stored: str) -> bool:
    """Whether `expression` is a beat's `stored` cron, unchanged (however it is spaced)."""
    return isinstance(expression, str) and cron_normalised(expression) == cron_normalised(stored)


def cron_parse(expression: str, *, stored: bool = False) -> Cron:
    """Validate `expression` and return it normalised; raises CronError with a reason a
    person (or a model) can act on. `stored`: the expression of a beat already saved, which
    may have a range running backwards from before those were refused; it keeps running
    as it did until it is changed (see cron_same)."""
    text = cron_normalised(expression) if isinstance(expression, str) else ""
    if not text:
        raise CronError("the cron expression is empty; use five fields like '0 8 * * 1-5'")
    expanded = ALIASES.get(text.lower(), text)
    parts = expanded.split(" ")
    if len(parts) != 5:
        raise CronError(
            f"{text!r} has {len(parts)} field(s); a cron expression has five: "
            "minute hour day-of-month month day-of-week (e.g. '0 8 * * 1-5' for 08:00 on weekdays)"
        )
    if len(text) > EXPRESSION_MAX:
        raise CronError(f"{text[:40]!r}… is longer than {EXPRESSION_MAX} characters; "
                        "write lists as ranges and steps (1-5, */15)")
    minute, hour, dom, month, dow = parts
    for name, value in zip(FIELDS, parts):
        if not _field_pattern(name).fullmatch(value.lower()):
            names = {"month_of_year": ", or names jan-dec", "day_of_week": ", or names sun-sat"}.get(name, "")
            raise CronError(f"{text!r}: bad {_LABELS[name]} field {value!r} (use * or numbers, lists like 1,15, "
                            f"ranges like 1-5 and steps like */15{names})")
        if not stored:
            _backwards_refused(text, name, value.lower())
    values = {"minute": minute, "hour": hour, "day_of_month": dom, "month_of_year": month,
              "day_of_week": _sunday_as_zero(dow)}
    for name, value in values.items():
        if len(value) > FIELD_MAX[name]:
            raise CronError(f"{text!r}: the {_LABELS[name]} field is longer than {FIELD_MAX[name]} characters; "
                            "write it as ranges and steps (1-5, */15)")
        try:
            crontab(**{name: value})
        except (ValueError, TypeError) as exc:
            raise CronError(f"{text!r}: bad {_LABELS[name]} field {value!r} ({exc})") from None
    try:
        crontab(**values)
    except (ValueError, TypeError) as exc:
        raise CronError(f"{text!r}: {exc}") from None
    return Cron(expression=text, **values)


_NAMES = {
    "month_of_year": "jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec",
    "day_of_week": "sun|mon|tue|wed|thu|fri|sat",
}


def _field_pattern(name: str) -> re.Pattern[str]:
    """What a field may hold: lists of *, numbers or (month, weekday) names, ranges and
    steps. Checked before Celery's parser, which reads a name by its first three
    letters only ('MON#1' as Monday, 'satsun' as Saturday) and would run such a beat far
    more often than meant."""
    value = r"\d+" + (f"|{_NAMES[name]}" if name in _NAMES else "")
    item = rf"(\*|(?:{value})(?:-(?:{value}))?)(?:/\d+)?"
    return re.compile(rf"{item}(?:,{item})*")


# Each field's first and last value, and the names that stand for numbers.
_BOUNDS = {"minute": (0, 59), "hour": (0, 23), "day_of_month": (1, 31), "month_of_year": (1, 12),
           "day_of_week": (0, 6)}
_NUMBER_OF = {
    "month_of_year": {name: number for number, name in enumerate(_NAMES["month_of_year"].split("|"), start=1)},
    "day_of_week": {name: number for number, name in enumerate(_NAMES["day_of_week"].split("|"))},
}


def _backwards_refused(text: str, name: str, value: str) -> None:
    """Refuse a range whose end comes before its start ('23-2'): classic cron refuses it,
    while Celery's parser wraps it past the end of the field (23, 0, 1, 2), which nobody
    reading the line would guess. The message spells the wrap out as two ranges."""
    numbers = _NUMBER_OF.get(name, {})
    for item in value.split(","):
        m = re.fullmatch(r"(\w+)-(\w+)(/\d+)?", item)
        if m is None:
            continue
        start, end, step = m.groups()
        first, last = (numbers.get(v, int(v) if v.isdigit() else -1) for v in (start, end))
        if last >= first:
            continue
        hint = "; to wrap past the end, write it as two ranges"
        if not step:
            low, high = _BOUNDS[name]
            if start in numbers:  # in names, as written
                high_text, low_text = _NAMES[name].split("|")[-1], _NAMES[name].split("|")[0]
            else:
                high_text, low_text = str(high), str(low)
            head = start if first == high or (name == "day_of_week" and first == 7) else f"{start}-{high_text}"
            tail = end if last == low else f"{low_text}-{end}"
            hint = f"; for the wrap past the end write '{head},{tail}'"
        raise CronError(f"{text!r}: the {_LABELS[name]} range {item} runs backwards (classic cron refuses it){hint}")


def _unknown(name: str) -> CronError:
    return CronError(f"unknown timezone {name!r}; use an IANA name such as 'Europe/Paris' or 'UTC'")


def timezone_parse(name: str) -> ZoneInfo:
    """The zone of a saved name, as zoneinfo reads it: a workspace's or a person's zone
    saved before names were checked as timezone_choose does still runs their beats."""
    try:
        return ZoneInfo(name)
    # OSError: a folder of the tz database ('Europe') or a name too long for a file name.
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise _unknown(name) from None


def timezone_choose(name: str) -> ZoneInfo:
    """The zone of a name given for a beat: only one a person can choose, not a file of
    the tz database that is no zone ('localtime', 'posix/Europe/Paris')."""
    if not zone_choosable(name):
        raise _unknown(name)
    return timezone_parse(name)


def _sunday_as_zero(dow: str) -> str:
    # Classic cron accepts 7 for Sunday; Celery's parser stops at 6.
    # A range up to 7 with a step, or from 7, is spelled out day by day ("5-7/2": 5,0).
    out = []
    for part in dow.split(","):
        m = re.fullmatch(r"([0-7])-7(?:/([1-9]\d*))?", part)
        if part == "7":
            out.append("0")
        elif m and (m.group(2) or m.group(1) == "7"):
            out.append(",".join(sorted({str(day % 7) for day in range(int(m.group(1)), 8, int(m.group(2) or 1))})))
        elif m:
            out.append(f"{m.group(1)}-6,0" if m.group(1) != "0" else "*")
        else:
            out.append(part)
    return ",".join(out)


def _day_matches(schedule: crontab, day: date) -> bool:
    return (
        day.month in schedule.month_of_year
        and day.day in schedule.day_of_month
        and day.isoweekday() % 7 in schedule.day_of_week
    )


def _localise(naive: datetime, zone: ZoneInfo) -> datetime:
    return naive.replace(tzinfo=zone)


def every_hour(schedule: crontab) -> bool:
    """Whether the schedule runs every hour (of the days it runs): it keeps its pace in
    real time when the clocks change."""
    return len(schedule.hour) == 24


def near_clock_change(zone: ZoneInfo, moment: datetime) -> bool:
    """Whether `zone`'s clocks change within CLOCK_CHANGE_WINDOW of `moment`."""
    return (moment - CLOCK_CHANGE_WINDOW).astimezone(zone).utcoffset() != (
        moment + CLOCK_CHANGE_WINDOW).astimezone(zone).utcoffset()


def _fires_at(schedule: crontab, local: datetime) -> bool:
    return local.minute in schedule.minute and local.hour in schedule.hour and _day_matches(schedule, local.date())


def _real_time_tick(schedule: crontab, zone: ZoneInfo, start: datetime, step: timedelta) -> datetime | None:
    """The first minute from `start` on (stepping by `step`, in real time) the schedule
    fires, within CLOCK_CHANGE_WINDOW: each minute read on `zone`'s clock as it was then."""
    moment = start
    for _ in range(CLOCK_CHANGE_WINDOW // _MINUTE):
        local = moment.astimezone(zone)
        if _fires_at(schedule, local):
            return local
        moment += step
    return None


def tick_previous(schedule: crontab, zone: ZoneInfo, now: datetime) -> datetime | None:
    """The latest moment at or before `now` the schedule fires, in `zone`; None if it
    never fired within the look-back window."""
    if every_hour(schedule) and near_clock_change(zone, now):
        found = _real_time_tick(schedule, zone, now.replace(second=0, microsecond=0), -_MINUTE)
        if found is not None:
            return found
    local = now.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)
    hours = sorted(schedule.hour, reverse=True)
    minutes = sorted(schedule.minute, reverse=True)
    for offset in range(_LOOKAHEAD_DAYS):
        day = local.date() - timedelta(days=offset)
        if not _day_matches(schedule, day):
            continue
        for hour in hours:
            if offset == 0 and hour > local.hour:
                continue
            for minute in minutes:
                if offset == 0 and hour == local.hour and minute > local.minute:
                    continue
                return _localise(datetime.combine(day, datetime.min.time()).replace(hour=hour, minute=minute), zone)
    return None


def tick_next(schedule: crontab, zone: ZoneInfo, after: datetime) -> datetime | None:
    """The first moment strictly after `after` the schedule fires, in `zone`."""
    if every_hour(schedule) and near_clock_change(zone, after):
        found = _real_time_tick(schedule, zone, after.replace(second=0, microsecond=0) + _MINUTE, _MINUTE)
        if found is not None:
            return found
    local = after.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)
    hours = sorted(schedule.hour)
    minutes = sorted(schedule.minute)
    for offset in range(_LOOKAHEAD_DAYS):
        day = local.date() + timedelta(days=offset)
        if not _day_matches(schedule, day):
            continue
        for hour in hours:
            if offset == 0 and hour < local.hour:
                continue
            for minute in minutes:
                if offset == 0 and hour == local.hour and minute <= local.minute:
                    continue
                return _localise(datetime.combine(day, datetime.min.time()).replace(hour=hour, minute=minute), zone)
    return None
