from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from qorven.runtime.backup import BackupError, backup_write, counts_said
from qorven.runtime.command_console import command_console
from qorven.runtime.scheduled_backups import UNREADABLE_FIX, BackupDirError, last_run, last_skip, scheduled_backups



class Command(BaseCommand):
    help = (
        "Copy the whole database (every tenant's conversations, attachments, memories, heartbeats, "
        "bindings and their secrets) to one file while Qorven keeps serving: a consistent snapshot, "
        "written owner-only, read back before it takes its name. SQLite (the embedded default): a "
        "compact SQLite file, restored by putting it in place of the database file with Qorven "
        "stopped. PostgreSQL: a pg_dump custom-format archive (pg_dump must be installed), restored "
        "with pg_restore. Keep the copy as private as the database: it holds the bot tokens and "
        "model keys. --list shows the scheduled backups (QORVEN_BACKUP_SCHEDULE) instead. README, Backups, "
        "has the restore steps."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "path", nargs="?",
            help="the file to write (must not exist), or an existing folder to write it in under the default "
                 "name; default: qorven-backup-<UTC time>.sqlite3 (.dump on PostgreSQL) in the current directory",
        )
        parser.add_argument(
            "--list", action="store_true",
            help="take none: list the scheduled backups in QORVEN_BACKUP_DIR, newest first, with their sizes and "
                 "times, the last scheduled run's failure if it failed, and a run skipped since the last began",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["list"]:
            if opts["path"]:
                raise CommandError("--list takes no file: it lists the scheduled backups in QORVEN_BACKUP_DIR")
            self._list()
            return
        database = settings.DATABASES["default"]
        sqlite = database["ENGINE"].endswith("sqlite3")
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        path = _target(opts["path"] or "", f"qorven-backup-{stamp}.{'sqlite3' if sqlite else 'dump'}")
        from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn

        console = command_console(self.stdout)
        columns = ([TextColumn("Copying the database"), BarColumn(), DownloadColumn()] if sqlite
                   else [TextColumn("Dumping tables"), BarColumn(), MofNCompleteColumn()])
        with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
            task = bar.add_task("copy", total=None)
            try:
                result = backup_write(database=database, path=path,
                                      progress=lambda done, total: bar.update(task, completed=done, total=total))
            except BackupError as exc:
                raise CommandError(str(exc)) from None
        held = counts_said(result.counts)
        self.stdout.write(f"Backed up to {result.path} ({_size(result.size)}, owner-only): {held}.")

    def _list(self) -> None:
        directory = settings.QORVEN_BACKUP_DIR
        try:
            backups = scheduled_backups(directory)
        except BackupDirError as exc:
            raise CommandError(f"QORVEN_BACKUP_DIR: {exc}. Run `qorven backup --list` {UNREADABLE_FIX}.") from None
        schedule = settings.QORVEN_BACKUP_SCHEDULE
        keep = settings.QORVEN_BACKUP_KEEP
        if schedule:
            self.stdout.write(f"Scheduled backups: '{schedule}' ({settings.TIME_ZONE}), "
                              + (f"the newest {keep} kept." if keep else "all kept."))
        else:
            self.stdout.write("Scheduled backups: off (QORVEN_BACKUP_SCHEDULE is empty).")
        if not backups:
            self.stdout.write(f"None in {directory}.")
        else:
            self.stdout.write(f"{len(backups)} in {directory}, newest first:")
            for backup in backups:
                self.stdout.write(f"  {backup.path.name}  {_size(backup.size):>12}  "
                                  f"{backup.taken_at:%Y-%m-%d %H:%M:%S} UTC")
            self.stdout.write(f"Total {_size(sum(backup.size for backup in backups))}.")
        last = last_run(directory)
        if last is not None and not last.ok:
            at = last.at.astimezone(UTC)
            self.stdout.write(f"The last scheduled run, at {at:%Y-%m-%d %H:%M:%S} UTC, failed: {last.error}")
        skip = last_skip(directory)
        if skip is not None and (last is None or skip.at > last.at):
            said = skip.describe(lambda moment: f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC")
            self.stdout.write(said[0].upper() + said[1:] + ".")


def _target(given: str, default_name: str) -> Path:
    """The file to write: `given`, or the default name in the folder `given` names (as cp
    and tar take a folder), or in the current one."""
    if not given:
        return Path(default_name).resolve()
    path = Path(given).expanduser()
    if path.is_dir():
        return (path / default_name).resolve()
    if given.endswith(("/", os.sep)):  # meant as a folder: never a file named after it
        raise CommandError(f"{given}: no such folder; make it first, or name the file to write")
    return path.resolve()


def _size(size: int) -> str:
    if size < 1024:
        return f"{size:,} bytes"
    value = float(size)
    for unit in ("KB", "MB", "GB"):
        value /= 1024
        if value < 1024:
            break
    return f"{value:,.1f} {unit}"
