from __future__ import annotations


from django.core.management.base import BaseCommand, CommandError

from qorven.runtime.arguments import given_path


class Command(BaseCommand):
    help = (
        "Sync learned skills from the skills folder (QORVEN_SKILLS_DIR, default plugins/skills/) into the "
        "database: one markdown file per skill with front matter (name, description, min_trust) and the "
        "instructions as its body. New files are added, changed files updated, removed files disabled; skills "
        "made in the admin are never touched. `qorven serve` and `qorven worker` run this at startup."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="show what would change, change nothing")
        parser.add_argument("--dir", type=given_path, help="the skills folder (default: QORVEN_SKILLS_DIR)")

    def handle(self, *args, **opts):
        from memory_app.skills import SkillFileError, skills_sync  # regex: not for `qorven --help`

        try:
            report = skills_sync(directory=opts["dir"], dry_run=opts["dry_run"])
        except SkillFileError as exc:
            raise CommandError(f"{exc}; nothing changed") from None
        prefix = "would be " if opts["dry_run"] else ""
        for label, names in (("added", report.added), ("updated", report.updated), ("disabled", report.disabled)):
            for name in names:
                self.stdout.write(f"  {prefix}{label}: {name}")
        for error in report.errors:
            self.stderr.write(f"  skipped {error}")
        self.stdout.write(report.summary())
