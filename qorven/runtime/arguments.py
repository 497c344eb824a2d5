"""Command-line arguments the management commands share."""
from __future__ import annotations

import argparse
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
            raise argparse.ArgumentTypeError(f"{number} is not in {low}-{high}")
        return number

    return parse
