from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from qorven.runtime.arguments import actions
from tenancy.errors import NotFound
from tenancy.selectors import tenant_get
from tenancy.services import tenant_resume, tenant_suspend


class Command(BaseCommand):
    help = (
        "Suspend or resume a workspace (tenant). `tenant suspend SLUG` stops serving everyone in it — the chat "
        "page, API tokens, open sockets, the terminal and the webchat embed refuse them, its beats do not run, "
        "and what platforms send it is kept in its conversations unanswered (no pairing codes either) — and "
        "deletes nothing. `tenant resume SLUG` serves it again, everything as it was; messages kept while it was "
        "suspended are not answered after the fact. `tenant status SLUG` says which it is. --dry-run says what "
        "would change and changes nothing."
    )

    def add_arguments(self, parser):
        sub = actions(parser)
        descriptions = {
            "suspend": "Stop serving a workspace, deleting nothing: the chat page, API tokens, open sockets, the "
                       "terminal and the webchat embed refuse its people, its beats do not run, and what "
                       "platforms send it is kept unanswered.",
            "resume": "Serve a suspended workspace again, everything as it was; messages kept while it was "
                      "suspended are not answered after the fact.",
            "status": "Say whether a workspace is active or suspended, and since when.",
        }
        for action, what in (("suspend", "stop serving the workspace; nothing is deleted"),
                             ("resume", "serve a suspended workspace again"),
                             ("status", "whether the workspace is suspended, and since when")):
            command = sub.add_parser(action, help=what, description=descriptions[action])
            command.add_argument("slug", help="the tenant's slug")
            if action != "status":
                command.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")

    def handle(self, *args, **opts):
        try:
            tenant = tenant_get(slug=opts["slug"])
        except NotFound as exc:
            raise CommandError(str(exc)) from None
        action = opts["action"]
        since = tenant.suspended_at.isoformat(timespec="seconds") if tenant.suspended_at else ""
        if action == "status":
            self.stdout.write(f"{tenant.slug}: suspended since {since}" if since else f"{tenant.slug}: active")
            return
        suspend = action == "suspend"
        if suspend == tenant.suspended:
            self.stdout.write(f"{tenant.slug} is already {'suspended (since ' + since + ')' if since else 'active'}; "
                              "nothing changed.")
            return
        if opts["dry_run"]:
            self.stdout.write(f"would {action} {tenant.slug}. Dry run: nothing changed.")
            return
        (tenant_suspend if suspend else tenant_resume)(tenant=tenant)
        self.stdout.write(self.style.SUCCESS(
            f"suspended {tenant.slug}: nobody in it is served until `qorven tenant resume {tenant.slug}`; nothing "
            "was deleted." if suspend else f"resumed {tenant.slug}: it is served again."))
