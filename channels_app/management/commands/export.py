from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, TextIO

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from channels_app.data_export import ExportCounts, PersonExport, export_blocks
from qorven.runtime.command_console import command_console
from tenancy.errors import NotFound
from tenancy.selectors import membership_get, qor_get, tenant_get

# Without a terminal to draw a bar on (a log, a pipe), a line each this many messages.
PLAIN_PROGRESS_EVERY = 100_000


class Command(BaseCommand):
    help = (
        "Export one person's own data in a tenant as JSON Lines: for them to keep, or for the host to "
        "answer a data-access request. One JSON object a line: a header (format, tenant, user, when), "
        "then each of their sessions (canonical chats, active and archived, and their email, sms, voice, "
        "cron and legacy threads) followed by its messages in seq order (role, text, channel, sender, time, "
        "answer state), then what the Qor remembers about them, the heartbeats they made and their channel "
        "identities, and an end line with the counts. Attachments are described (type, size, name); "
        "--with-attachments adds their data, base64, one line each. Left out: group chats, other people's "
        "data, the Qor's tool working, credentials and the host's settings. Written to stdout, or to "
        "--output FILE (complete or not at all; an existing FILE is refused); progress and a summary go to stderr. The person can "
        "download the same file from the chat page or GET /v1/export."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, metavar="SLUG", help="the tenant whose data it is")
        parser.add_argument("--user", required=True, metavar="USERNAME", help="whose data (a member of the tenant)")
        parser.add_argument("--qor", metavar="SLUG",
                            help="only the conversations, memories and beats with this Qor (default: every Qor)")
        parser.add_argument("--with-attachments", action="store_true",
                            help="include the attached files' data (base64); they can make the export large")
        parser.add_argument("--output", metavar="FILE", help="write to FILE instead of stdout")
        parser.add_argument("--left", action="store_true",
                            help="the person is no longer a member (a host answering a former member's request); "
                                 "without it, only members are exported")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["output"]:
            _check_writable(Path(opts["output"]))
        export = PersonExport(**self._scope(opts), attachments=opts["with_attachments"],
                              progress=self._progress_reporter())
        target = opts["output"]
        with self._progress:
            if target:
                _write_whole(Path(target), export)
            else:
                try:
                    for block in export_blocks(export.lines()):
                        self.stdout.write(block, ending="")
                    self.stdout.flush()
                except BrokenPipeError:
                    # `qorven export … | head`: the reader has what it wanted. Python would
                    # otherwise print the error again flushing stdout as it exits.
                    try:
                        os.dup2(os.open(os.devnull, os.O_WRONLY), self.stdout._out.fileno())
                    except (OSError, ValueError):
                        pass
                    self.stderr.write("Export stopped: the reader of the output closed it.")
                    raise SystemExit(1) from None
        where = f" to {target}" if target else ""
        self.stderr.write(f"Exported {opts['user']}'s data in {opts['tenant']}{where}: {_summary(export.counts)}")

    def _scope(self, opts: dict[str, Any]) -> dict[str, Any]:
        try:
            tenant = tenant_get(slug=opts["tenant"])
        except NotFound as exc:
            raise CommandError(str(exc)) from None
        user = get_user_model().objects.filter(username=opts["user"]).first()
        if user is None:
            raise CommandError(f"no user {opts['user']!r}")
        try:
            membership_get(tenant=tenant, user=user)
        except NotFound:
            if not opts["left"]:
                raise CommandError(f"{opts['user']} is not a member of {opts['tenant']} (for someone who has "
                                   "left, say --left)") from None
        if opts["qor"] is not None and not opts["qor"].strip():  # `--qor "$Q"`, Q unset: not every Qor's data
            raise CommandError("--qor needs a slug; leave it out to export every Qor's")
        try:
            qor = qor_get(tenant=tenant, slug=opts["qor"]) if opts["qor"] else None
        except NotFound as exc:
            raise CommandError(str(exc)) from None
        return {"tenant": tenant, "user": user, "qor": qor}

    def _progress_reporter(self) -> Any:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        console = command_console(self.stderr)
        self._progress = Progress(SpinnerColumn(), TextColumn("exporting: {task.fields[counts]}"),
                                  TimeElapsedColumn(), console=console, transient=True,
                                  disable=not console.is_terminal)
        task = self._progress.add_task("export", total=None, counts="starting")
        reported = [0]

        def report(counts: ExportCounts) -> None:
            if console.is_terminal:
                self._progress.update(task, counts=f"{counts.sessions:,} sessions, {counts.messages:,} messages")
            elif counts.messages - reported[0] >= PLAIN_PROGRESS_EVERY:
                reported[0] = counts.messages
                self.stderr.write(f"… {counts.messages:,} messages so far")

        return report


def _check_writable(target: Path) -> None:
    """Refuse, before any work, an --output that could never take the file: the export would
    run to its end and fail at the rename (or the first write) with a traceback."""
    if target.is_dir():
        raise CommandError(f"--output {target} is a folder: name the file to write, e.g. {target / 'export.jsonl'}")
    if not target.parent.is_dir():
        raise CommandError(f"--output {target}: no such folder {target.parent}; nothing was written")
    if target.exists() or target.is_symlink():
        raise _exists(target)


def _exists(target: Path) -> CommandError:
    # As `qorven backup` does: a mistyped --output must not cost the host a file.
    return CommandError(f"--output {target} already exists; name another file or remove it first; "
                        "nothing was written")


def _write_whole(target: Path, export: PersonExport) -> None:
    """Write beside `target` and give it that name at the end: an export that fails half
    way leaves no file that looks whole, and a file that took the name meanwhile is kept."""
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    except OSError as exc:  # a folder we may not write in, say
        raise CommandError(f"--output {target}: cannot write there ({exc.strerror}); nothing was written") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            _write(out, export)
        _take_name(Path(temporary), target)
    except FileExistsError:
        Path(temporary).unlink(missing_ok=True)
        raise _exists(target) from None
    except OSError as exc:  # the disk filled up, or the name was taken by a folder meanwhile
        Path(temporary).unlink(missing_ok=True)
        raise CommandError(f"--output {target}: {exc.strerror}; nothing was written") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _take_name(written: Path, target: Path) -> None:
    """Give `written` the name `target` only if it is still free: a file made there while
    the export ran is kept (FileExistsError)."""
    try:
        os.link(written, target)
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: check, then rename
        if target.exists() or target.is_symlink():
            raise FileExistsError(target) from None
        os.replace(written, target)
        return
    written.unlink()


def _write(out: TextIO, export: PersonExport) -> None:
    for block in export_blocks(export.lines()):
        out.write(block)


def _summary(counts: ExportCounts) -> str:
    def n(count: int, one: str, many: str) -> str:
        return f"{count:,} {one if count == 1 else many}"

    return ", ".join([
        n(counts.sessions, "session", "sessions"), n(counts.messages, "message", "messages"),
        n(counts.attachments, "attachment", "attachments"), n(counts.memories, "memory", "memories"),
        n(counts.heartbeats, "heartbeat", "heartbeats"), n(counts.identities, "channel identity", "channel identities"),
    ])
