"""The `qorven` console command: Django's management commands, hyphenated names accepted."""
from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    if argv[1:] == ["--version"]:  # Qorven's, not Django's
        print(f"qorven {_version()}")
        return 0
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qorven.settings")
    if len(argv) > 1 and not argv[1].startswith("-"):
        # `qorven collapse-sessions` runs the `collapse_sessions` command.
        argv[1] = argv[1].replace("-", "_")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(argv)
    except ImproperlyConfigured as exc:  # a setting is missing or malformed: say which, no traceback
        print(f"qorven: configuration error: {exc}", file=sys.stderr)
        return 2
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("qorven")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"
