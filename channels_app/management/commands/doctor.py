from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from qorven.runtime.command_refusal import AlreadySaid


class Command(BaseCommand):
    help = (
        "Check that this install can work and say how to fix what cannot: the database (reachable, "
        "migrated), Redis and the workers (scale-out), each Qor's model (one short request to it), each "
        "channel binding's credentials against its platform (those bind would refuse now, saved before it checked them "
        "— a bot token that is not one — are named with the bind that replaces them) and Telegram's webhook registration (its URL "
        "and that it is sent message edits), a mail "
        "server (EMAIL_URL) for an email binding, the "
        "heartbeats defaults file, the skills folder, pg_dump for `qorven backup` (PostgreSQL), the scheduled "
        "backups (off, or the newest one's age; late or failed is a ✗), and `check --deploy` outside the "
        "embedded default. "
        "Changes nothing. Exits 1 when any check fails."
    )

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="one JSON object: every check and whether all passed")

    def handle(self, *args, **opts):
        from channels_app.doctor import doctor_checks

        checks = doctor_checks()
        failed = [c for c in checks if not c.ok]
        if opts["json"]:
            self.stdout.write(json.dumps({"ok": not failed, "checks": [c.as_dict() for c in checks]}))
        else:
            for check in checks:
                mark = self.style.SUCCESS("✓") if check.ok else self.style.ERROR("✗")
                self.stdout.write(f"{mark} {check.area} · {check.subject}: {check.detail}")
                if check.fix:
                    self.stdout.write(f"    fix: {check.fix}")
            self.stdout.write(f"\n{len(checks) - len(failed)} of {len(checks)} checks passed.")
        if failed:  # the summary above says how many: exit 1 without saying it again
            raise AlreadySaid(returncode=1)
