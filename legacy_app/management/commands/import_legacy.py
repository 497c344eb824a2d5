from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from legacy_app.legacy_import import ImportProblem, legacy_import
from qorven.runtime.command_console import command_console


class Command(BaseCommand):
    help = (
        "Load a per-channel install's JSON-lines export into legacy sessions. One object per "
        'line: {"tenant": slug, "qor": slug, "user": username, "session": key, "role": '
        'user|assistant|system|tool, "content": text, "channel": telegram|web|…, '
        '"created_at": ISO 8601, "sender_name": text}. Lines sharing (tenant, qor, channel, '
        "session) become one legacy session; missing users are created (no usable password) "
        "and made members of the tenant. Timestamps are kept (without an offset they are read "
        "in the tenant's timezone). Bad lines are reported with their line number and "
        "skipped; the rest is imported, and the command then exits with status 1. Importing "
        "the same file again adds nothing. Imported messages are not sent to any channel. "
        "Follow with `qorven collapse-sessions` to merge them into each user's one chat. "
        "FILE may be - for standard input."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", metavar="FILE", help="the JSON-lines export (- for stdin)")

    def handle(self, *args: Any, **opts: Any) -> None:
        from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
        from rich.table import Table

        path: str = opts["file"]
        console = command_console(self.stdout)
        try:
            handle: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        size = None if path == "-" else os.fstat(handle.fileno()).st_size
        progress = Progress(
            TextColumn("importing"),
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )

        def lines(task: TaskID) -> Iterator[bytes]:
            for raw in handle:
                progress.advance(task, len(raw))
                yield raw

        def problem(p: ImportProblem) -> None:
            progress.console.print(
                f"line {p.line}: {p.reason}",
                style="red",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )

        try:
            with progress:
                summary = legacy_import(
                    lines=lines(progress.add_task("import", total=size)), on_problem=problem
                )
        finally:
            if handle is not sys.stdin.buffer:
                handle.close()
        table = Table(title=f"import-legacy {path}", header_style="bold")
        table.add_column("")
        table.add_column("count", justify="right")
        for name, value in (
            ("lines read", summary.lines),
            ("messages imported", summary.imported),
            ("already present (skipped)", summary.already_present),
            ("bad lines (skipped)", summary.skipped),
            ("legacy sessions created", summary.sessions_created),
            ("users created", summary.users_created),
            ("memberships created", summary.memberships_created),
        ):
            table.add_row(name, f"{value:,}")
        console.print(table)
        if summary.skipped:
            if summary.imported:
                rest = f"the other {summary.imported:,} message(s) were imported"
            elif summary.already_present:
                rest = "the other lines were already imported, so nothing new was stored"
            else:
                rest = "nothing was imported"
            raise CommandError(f"{summary.skipped} bad line(s) skipped (listed above); {rest}")
