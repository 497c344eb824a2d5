from __future__ import annotations


from django.core.management.base import BaseCommand, CommandError

from qorven.runtime.arguments import given_path


class Command(BaseCommand):
    help = (
        "Sync the heartbeats defaults file (QORVEN_HEARTBEATS_FILE, by default "
        "heartbeats.default.json) into the Heartbeat table: beats in the file are created or "
        "updated and marked managed, managed beats dropped from the file are deleted, beats made "
        "by users are never touched. A file with problems is reported line by line and changes "
        "nothing. `qorven serve` and `qorven beat` run this on startup."
    )

    # heartbeats_app.defaults (pydantic) is imported by the methods, not as `qorven --help`
    # reads this command's help.
    def add_arguments(self, parser):
        from heartbeats_app.defaults import defaults_path

        parser.add_argument("--dry-run", action="store_true", help="show what would change and change nothing")
        parser.add_argument("--file", type=given_path, help=f"the defaults file (default: {defaults_path()})")

    def handle(self, *args, **opts):
        from heartbeats_app.defaults import DefaultsFileError, beats_sync

        try:
            plan = beats_sync(path=opts["file"], dry_run=opts["dry_run"])
        except DefaultsFileError as exc:
            for problem in exc.problems:
                self.stderr.write(problem.render(str(exc.path)))
            raise CommandError(f"{exc.path}: {len(exc.problems)} problem(s); nothing was changed") from None
        for line in plan.lines():
            self.stdout.write(line)
        summary = (
            f"{len(plan.create)} to create, {len(plan.update)} to update, {len(plan.delete)} to delete, "
            f"{len(plan.unchanged)} unchanged"
        )
        if opts["dry_run"]:
            self.stdout.write(f"dry run: {summary}; nothing was changed")
        else:
            self.stdout.write(self.style.SUCCESS(
                summary.replace("to create", "created").replace("to update", "updated").replace("to delete", "deleted")
            ))
