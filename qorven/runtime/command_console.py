"""Rich output through a command's `self.stdout`, so call_command(stdout=…) captures it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.management.base import OutputWrapper

if TYPE_CHECKING:  # imported by the commands that print with it, when they run
    from rich.console import Console


class _Passthrough:
    """A file for rich: writes go to the command's stdout without the wrapper's extra newline."""

    def __init__(self, out: OutputWrapper) -> None:
        self._out = out

    def write(self, text: str) -> int:
        self._out.write(text, ending="")
        return len(text)

    def flush(self) -> None:
        self._out.flush()

    def isatty(self) -> bool:
        return self._out.isatty()


def command_console(stdout: OutputWrapper) -> Console:
    """A rich Console on `stdout`: live and coloured on a terminal, plain (120 wide) otherwise."""
    from rich.console import Console

    terminal = stdout.isatty()
    return Console(file=_Passthrough(stdout), width=None if terminal else 120)  # type: ignore[arg-type]
