"""Command-line arguments the management commands share."""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Callable

from django.core.management.base import CommandError, CommandParser


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


def actions(parser: CommandParser, *, dest: str = "action", metavar: str | None = None) -> Any:
    """The actions of a command whose first word is one (`qorven pair approve …`), to each
    `add_parser(name, help=…)`: the help is its line in the list a command given no action
    prints, one line each, as git lists its commands (argparse said only "the following
    arguments are required: action"). `metavar` names them otherwise (bind's "channel")."""
    chooser = parser.add_subparsers(dest=dest, metavar=metavar, required=False)  # ActionParser says it is missing
    # Django makes a command's parser itself (BaseCommand.create_parser), its class not ours
    # to choose: this one is a CommandParser that checks the action once parsing is done.
    parser.__class__ = ActionParser
    assert isinstance(parser, ActionParser)
    parser.chooser = chooser
    return chooser


class ActionParser(CommandParser):
    """A command's parser made by `actions`: given no action, it lists them and exits 2
    (a CommandError when called from code, as CommandParser's errors are)."""

    chooser: Any = None

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        namespace, extras = super().parse_known_args(args, namespace)
        if self.chooser is not None and getattr(namespace, self.chooser.dest, None) is None:
            names = list(self.chooser.choices)
            if not self.called_from_command_line:
                raise CommandError(f"Error: {self.prog} takes one of these {self._noun()}s: {', '.join(names)}")
            self.exit(2, self.actions_listed())
        return namespace, extras

    def _noun(self) -> str:
        return self.chooser.metavar or self.chooser.dest

    def actions_listed(self) -> str:
        """The usage line, then each action with its one line of help."""
        helps = {choice.dest: choice.help or "" for choice in self.chooser._get_subactions()}
        width = max(len(name) for name in helps)
        noun = self._noun()
        lines = [f"usage: {self.prog} <{noun}> [options]", "", f"{self.prog} takes one of these {noun}s:",
                 *(f"  {name:<{width}}  {what}".rstrip() for name, what in helps.items()), "",
                 f"`{self.prog} <{noun}> --help` explains each."]
        return "\n".join(lines) + "\n"
