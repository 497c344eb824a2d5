"""The settings file's own check: each line one django-environ reads as meant."""
from __future__ import annotations

import re
from pathlib import Path

import environ

# What django-environ reads from a settings file: NAME=value, `export ` before it if wanted.
_ENV_LINE = re.compile(r"\A(?:export )?([A-Za-z_0-9]+)=(.*)\Z")


def env_file_check(path: str) -> None:
    """ImproperlyConfigured, naming the file, the line and the variable but never the value
    (a key, a password), for a line of the settings file django-environ would not read as
    meant: one that is not NAME=value (it skipped it, warning with the whole line, and the
    setting took its default), or a quoted value followed by more text (`"a b" # note`:
    the quotes and the note were the value)."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        read = _ENV_LINE.match(line)
        if read is None:
            name = line.split("=", 1)[0].strip().removeprefix("export ").strip()
            named = f"{name}: " if "=" in line and re.fullmatch(r"[A-Za-z_0-9]+", name) else ""
            raise environ.ImproperlyConfigured(
                f"{path}, line {number}: {named}not a NAME=value line (no spaces around the =; a comment "
                "starts with #)")
        value = read[2]
        if value[:1] in ("'", '"') and (len(value) < 2 or value[-1] != value[0]):
            raise environ.ImproperlyConfigured(
                f"{path}, line {number}: {read[1]}'s value opens a quote it does not end with: a comment goes on "
                "a line of its own")
