"""The `qorven` console command: Django's management commands, hyphenated names accepted."""
from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qorven.settings")
    if len(argv) > 1 and not argv[1].startswith("-"):
        # `qorven collapse-sessions` runs the `collapse_sessions` command.
        argv[1] = argv[1].replace("-", "_")
    from django.core.management import execute_from_command_line

    execute_from_command_line(argv)
    return 0
