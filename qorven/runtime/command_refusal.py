"""How a Qorven command's refusal reaches the person who ran it: our sentence alone on
stderr, and the exit status the command chose."""
from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, SystemCheckError


class AlreadySaid(CommandError):
    """A failure the command has reported on its output already (doctor's ✗ lines and its
    summary): it ends with `returncode` and nothing more is printed."""

    def __init__(self, *, returncode: int = 1) -> None:
        super().__init__("", returncode=returncode)


def plain_refusals(command: BaseCommand) -> None:
    """Make `command`, run from the command line, print a CommandError as our sentence
    alone. Django's run_from_argv prints "CommandError: " in front of it, a class name
    the person never needs; it still closes the connections as the exit passes through it.
    --traceback still shows the traceback."""
    execute = command.execute

    def execute_plainly(*args: Any, **options: Any) -> Any:
        try:
            return execute(*args, **options)
        except CommandError as exc:
            if options.get("traceback") or isinstance(exc, SystemCheckError):  # formatted by Django itself
                raise
            if str(exc):
                command.stderr.write(str(exc))
            sys.exit(exc.returncode)

    command.execute = execute_plainly  # type: ignore[method-assign]
