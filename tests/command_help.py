"""A management command's --help read as a person reads it, for the tests that every
command and subcommand explains itself."""
from __future__ import annotations

import pytest
from django.core.management import call_command


def help_text(capsys, *argv: str) -> tuple[str, dict[str, str]]:
    """A subcommand's --help as a person reads it: the description under its usage line,
    and each argument's own explanation."""
    with pytest.raises(SystemExit) as ended:
        call_command(*argv, "--help")
    assert ended.value.code == 0
    text = capsys.readouterr().out
    description = text.split("\n\n")[1]
    arguments: dict[str, str] = {}
    for block in text.split("\n\n")[2:]:
        for line in block.splitlines()[1:]:
            if line.startswith("  ") and not line.startswith("   "):
                name, _, explained = line.strip().partition("  ")
                arguments[name.split()[0].rstrip(",")] = explained.strip()
            elif line.strip() and arguments:
                last = list(arguments)[-1]
                arguments[last] = (arguments[last] + " " + line.strip()).strip()
    return description, arguments
