from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from legacy_app.collapse import (
    CollapseOutcome,
    CollapseTotals,
    collapse_owner_count,
    collapse_sessions,
    collapse_suspended,
)
from qorven.runtime.command_console import command_console
from tenancy.errors import NotFound
from tenancy.models import Qor
from tenancy.selectors import tenant_get

if TYPE_CHECKING:
    from rich.table import Table


class Command(BaseCommand):
    help = (
        "Migrate a per-channel install to one canonical chat per (tenant, Qor, user). "
        "Every user with an active legacy per-channel chat session (web, tui, telegram, "
        "whatsapp, slack_dm, discord_dm, webchat), beside other chat sessions or alone, gets "
        "their messages merged into the canonical session in timestamp order, deduplicated "
        "on (role, created_at, content), channel tags kept; one conversation_digest memory "
        "is written per archived session and the legacy sessions are archived (a lone legacy "
        "chat becomes the canonical one, or its history would show on no surface). Group, email, "
        "sms, voice and cron sessions are never touched. Each user is one transaction, so an "
        "interrupted run leaves every user collapsed or untouched; running it again is a "
        "no-op. Nothing is deleted: duplicate copies stay in their archived session. A user "
        "whose chat is answering a message right then is left untouched and reported; run "
        "again once the reply is sent. A workspace the host suspended is skipped, and said "
        "to be, until it is resumed: nothing of it changes meanwhile and no model is asked "
        "anything for it. "
        "Use --dry-run first to see what would change (one line per user); -v 2 prints a "
        "line per user when applying too."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="print, per user, how many sessions and messages would merge and how many "
            "duplicates would drop; change nothing",
        )
        parser.add_argument(
            "--jobs",
            type=int,
            default=1,
            metavar="N",
            help="collapse N users at once, each still in its own transaction (default 1); "
            "2-4 pay on PostgreSQL, nothing on SQLite, which writes one transaction at a time",
        )
        parser.add_argument("--tenant", metavar="SLUG", help="only this tenant")
        parser.add_argument("--qor", metavar="SLUG", help="only Qors with this slug")
        parser.add_argument("--user", metavar="USERNAME", help="only this user")

    def handle(self, *args: Any, **opts: Any) -> None:
        from rich.markup import escape
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        jobs: int = opts["jobs"]
        if jobs < 1:
            raise CommandError("--jobs must be at least 1")
        scope = self._scope(opts)
        dry_run: bool = opts["dry_run"]
        console = command_console(self.stdout)
        skipped = collapse_suspended(**scope)
        for slug, users in skipped.items():
            chats = "1 user's chats" if users == 1 else f"{users} users' chats"
            self.stdout.write(f"Skipped {slug}: the workspace is suspended, {chats} left untouched;"
                              " resume it and run again.")
        total = collapse_owner_count(**scope)
        if total == 0:
            self.stdout.write("Nothing else to collapse." if skipped else
                              "Nothing to collapse: no user has a legacy chat session left.")
            return
        totals = CollapseTotals(skipped=sum(skipped.values()))
        failures: list[CollapseOutcome] = []
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )
        verb = "previewing" if dry_run else "collapsing"
        with progress:
            task = progress.add_task(f"{verb} {total} users", total=total)
            for outcome in collapse_sessions(**scope, dry_run=dry_run, jobs=jobs):
                totals.add(outcome)
                if outcome.error:
                    failures.append(outcome)
                    progress.console.print(
                        f"[red]FAILED[/red] {escape(outcome.label)}: {escape(outcome.error)}",
                        soft_wrap=True,
                    )
                elif dry_run or opts["verbosity"] >= 2:
                    progress.console.print(
                        self._line(outcome, dry_run), markup=False, highlight=False, soft_wrap=True
                    )
                progress.advance(task)
        console.print(self._summary(totals, dry_run))
        if failures:
            raise CommandError(
                f"{len(failures)} user(s) failed and were left untouched (see above);"
                " fix the cause and run again"
            )

    def _scope(self, opts: dict[str, Any]) -> dict[str, Any]:
        for option in ("tenant", "qor", "user"):
            # Given but empty (`--tenant "$T"`, T unset) is a mistake, not "everyone".
            if opts[option] is not None and not opts[option].strip():
                raise CommandError(f"--{option} needs a {'username' if option == 'user' else 'slug'}; "
                                   "leave it out to collapse every one")
        scope: dict[str, Any] = {"tenant": None, "qor_slug": opts["qor"] or "", "user": None}
        if opts["tenant"]:
            try:
                scope["tenant"] = tenant_get(slug=opts["tenant"])
            except NotFound as exc:
                raise CommandError(str(exc)) from None
        if opts["qor"]:
            qors = Qor.objects.filter(slug=opts["qor"])
            if scope["tenant"] is not None:
                qors = qors.filter(tenant=scope["tenant"])
            if not qors.exists():
                raise CommandError(f"no qor {opts['qor']!r}")
        if opts["user"]:
            scope["user"] = get_user_model().objects.filter(username=opts["user"]).first()
            if scope["user"] is None:
                raise CommandError(f"no user {opts['user']!r}")
        return scope

    @staticmethod
    def _line(outcome: CollapseOutcome, dry_run: bool) -> str:
        def n(count: int, noun: str) -> str:
            return f"{count} {noun}" if count == 1 else f"{count} {noun}s"

        if dry_run:
            return (
                f"{outcome.label}: would merge {n(outcome.sessions, 'session')} with "
                f"{n(outcome.messages, 'message')} into one chat of {outcome.merged}; would drop "
                f"{n(outcome.duplicates, 'duplicate')}, archive {outcome.archived}, write "
                f"{n(outcome.digests, 'digest')}"
            )
        return (
            f"{outcome.label}: merged {n(outcome.sessions, 'session')} with "
            f"{n(outcome.messages, 'message')} into one chat of {outcome.merged}; left "
            f"{n(outcome.duplicates, 'duplicate')} behind, archived {outcome.archived}, wrote "
            f"{n(outcome.digests, 'digest')}"
        )

    @staticmethod
    def _summary(totals: CollapseTotals, dry_run: bool) -> Table:
        from rich.table import Table

        title = "collapse-sessions --dry-run (nothing changed)" if dry_run else "collapse-sessions"
        table = Table(title=title, show_header=True, header_style="bold")
        table.add_column("")
        table.add_column("count", justify="right")
        rows = [
            ("users " + ("to collapse" if dry_run else "collapsed"), totals.users),
            ("sessions merged (canonical included)", totals.sessions),
            ("sessions " + ("to archive" if dry_run else "archived"), totals.archived),
            ("messages in those sessions", totals.messages),
            ("messages in canonical chats", totals.messages - totals.duplicates),
            (
                "duplicates " + ("to drop" if dry_run else "left in archived sessions"),
                totals.duplicates,
            ),
            ("digests " + ("to write" if dry_run else "written"), totals.digests),
            ("users failed (untouched)", totals.failed),
            ("users skipped (workspace suspended)", totals.skipped),
        ]
        for name, value in rows:
            table.add_row(name, f"{value:,}")
        return table
