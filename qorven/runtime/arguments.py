"""Command-line arguments the management commands share."""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Callable


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high`, else a usage error naming the
    option (Celery reads a concurrency of 0 as one process per CPU, a port past 65535 is
    taken modulo by the socket layer, a negative count of messages would be read as none)."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if not low <= number <= high:
            # A bound no one types (the largest id a query takes) is not worth reading out.
            within = f"{low} or more" if high >= 2**31 else f"in {low}-{high}"
            raise argparse.ArgumentTypeError(f"{number} is not {within}")
        return number

    return parse


def seconds(*, more_than_zero: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds, 0 or more (more than 0 with
    `more_than_zero`), else a usage error naming the option (a negative wait was taken as
    none at all, and a NaN slept no time between Celery beat's checks)."""

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
        if not math.isfinite(number) or number < 0 or (more_than_zero and number == 0):
            bound = "above 0" if more_than_zero else "0 or more"
            raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds {bound}")
        return number

    return parse


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(value: str) -> str:
    """An argparse type: a log level in any case, as QORVEN_LOG_LEVEL takes them, given back
    in capitals; else a usage error naming the option (Celery's own refusal of one was a
    traceback)."""
    if value.strip().upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{value!r} is not one of {', '.join(LOG_LEVELS)} (any case)")
    return value.strip().upper()


def given_path(value: str) -> Path:
    """An argparse type: a path that is not empty. `--dir "$DIR"` with DIR unset would
    otherwise name the current folder, and a sync would take it for the folder meant
    (every skill not in it disabled)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty path (leave the option out for the default)")
    return Path(value)
