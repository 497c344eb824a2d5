from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from rich.console import Console
from rich.table import Table

from channels_app.pairing import pairing_approve, pairing_deny, pairing_pending
from tenancy.errors import NotFound
from tenancy.selectors import membership_get, tenant_get


class Command(BaseCommand):
    help = (
        "Pairing of unknown senders. `pair list --tenant T` shows pending requests; "
        "`pair approve CODE --tenant T [--user U]` admits the sender the code was issued to "
        "(linked to user U, or to a new user made for them) on that channel only; "
        "`pair deny CODE --tenant T` refuses them."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list", help="pending pairing requests")
        listing.add_argument("--tenant", required=True)
        approve = sub.add_parser("approve", help="approve a code")
        approve.add_argument("code")
        approve.add_argument("--tenant", required=True)
        approve.add_argument("--user", help="existing username to link the sender to (a member of the tenant)")
        deny = sub.add_parser("deny", help="deny a code")
        deny.add_argument("code")
        deny.add_argument("--tenant", required=True)

    def handle(self, *args, **opts):
        try:
            tenant = tenant_get(slug=opts["tenant"])
        except NotFound as exc:
            raise CommandError(str(exc)) from None
        action = opts["action"]
        if action == "list":
            table = Table(title=f"Pending pairing requests of {tenant.slug}")
            for col in ("code", "channel", "sender", "name", "expires"):
                table.add_column(col)
            rows = pairing_pending(tenant=tenant)
            for r in rows:
                table.add_row(r.code, r.channel, r.external_id, r.identity.display_name,
                              r.expires_at.strftime("%Y-%m-%d %H:%M"))
            Console(file=self.stdout, width=100).print(table if rows else "No pending requests.")
            return
        try:
            if action == "approve":
                user = None
                if opts.get("user"):
                    user = get_user_model().objects.filter(username=opts["user"]).first()
                    if user is None:
                        raise CommandError(f"no user {opts['user']!r}")
                    try:
                        membership_get(tenant=tenant, user=user)
                    except NotFound:
                        raise CommandError(f"{opts['user']!r} is not a member of {tenant.slug}") from None
                identity = pairing_approve(tenant=tenant, code=opts["code"], user=user, via="cli")
                self.stdout.write(self.style.SUCCESS(
                    f"approved {identity.channel}:{identity.external_id} as {identity.user.get_username()}"
                ))
            else:
                identity = pairing_deny(tenant=tenant, code=opts["code"], via="cli")
                self.stdout.write(f"denied {identity.channel}:{identity.external_id}")
        except NotFound as exc:
            raise CommandError(str(exc)) from None
