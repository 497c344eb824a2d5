from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from qorven.runtime.backup import BackupError, counts_said, database_counts
from qorven.runtime.command_console import command_console
from qorven.runtime.restore import restore_apply, restore_plan


class Command(BaseCommand):
    help = (
        "Put a backup made by qorven backup in place of the database. Stop qorven serve, the workers "
        "and beat first (what they wrote meanwhile would be lost with the replaced database). The "
        "database being replaced is copied first, as qorven backup copies it, to "
        "qorven-before-restore-<UTC time> in --keep-dir, so a restore is undone by restoring that "
        "copy. SQLite: the file is replaced in one rename; PostgreSQL: the schema's tables are dropped and "
        "pg_restore's script run by psql in a single transaction (all or nothing). Then this version's migrations are applied. Asks to confirm "
        "unless --yes."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("backup", help="the file qorven backup wrote")
        parser.add_argument("--keep-dir", default=".", metavar="DIR",
                            help="where the database being replaced is copied first (default: here)")
        parser.add_argument("--yes", action="store_true", help="do not ask to confirm")

    def handle(self, *args: Any, **opts: Any) -> None:
        database = settings.DATABASES["default"]
        keep_dir = Path(opts["keep_dir"]).resolve()
        if not keep_dir.is_dir():
            raise CommandError(f"{keep_dir} is not a directory")
        try:
            plan = restore_plan(database=database, backup=Path(opts["backup"]).resolve(), keep_dir=keep_dir)
        except BackupError as exc:
            raise CommandError(str(exc)) from None
        held = counts_said(plan.counts)
        self.stdout.write(f"This replaces the database ({database['NAME']}) with {plan.backup}"
                          + (f" ({held})" if held else "") + "."
                          + (f"\nThe database as it is now is kept as {plan.kept_as}." if plan.kept_as else ""))
        if not opts["yes"]:
            try:
                answer = input("Restore? [y/N] ")
            except EOFError:  # `</dev/null`, Ctrl-D: no answer is a no
                self.stdout.write("")
                raise CommandError("No answer (end of input): nothing was changed.") from None
            if answer.strip().lower() not in ("y", "yes"):
                raise CommandError("Nothing was changed.")
        from rich.progress import BarColumn, Progress, TextColumn

        connections.close_all()
        console = command_console(self.stdout)
        with Progress(TextColumn("Keeping the current database"), BarColumn(), console=console, transient=True,
                      disable=not console.is_terminal) as bar:
            task = bar.add_task("keep", total=None)
            try:
                restore_apply(database=database, plan=plan,
                              progress=lambda done, total: bar.update(task, completed=done, total=total))
            except BackupError as exc:
                raise CommandError(str(exc)) from None
        call_command("migrate", verbosity=0, interactive=False)
        kept = f" The replaced database is in {plan.kept_as}." if plan.kept_as else ""
        # A dump is not read before it is restored (SQLite's backup was): say now what it held.
        held = "" if plan.counts else f" ({counts_said(database_counts())})"
        self.stdout.write(f"Restored {plan.backup}{held}; migrations applied.{kept}")
