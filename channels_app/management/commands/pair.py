from __future__ import annotations

from zoneinfo import ZoneInfo

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from channels_app.pairing import (
    paired_identity_get,
    pairing_approve,
    pairing_deny,
    pairing_paired,
    pairing_pending,
)
from channels_app.pairing_end import pairing_end_preview, pairing_revoke
from qorven.runtime.arguments import actions
from tenancy.errors import NotFound
from tenancy.selectors import membership_get, tenant_get


class Command(BaseCommand):
    help = (
        "Pair platform accounts with people (list [--paired], approve, deny, revoke). "
        "`pair list --tenant T` shows pending requests, "
        "`--paired` the accounts paired now; `pair approve CODE --tenant T [--user U]` admits the sender "
        "the code was issued to (linked to user U, or to a new user made for them) on that channel only; "
        "`pair deny CODE --tenant T` refuses them. `pair revoke CHANNEL SENDER_ID --tenant T` (or "
        "`--identity ID`) takes a paired account's access away, as the admin does: it is denied from then "
        "on (with --unlink: unlinked, a stranger who may ask for a new code), its messages still waiting "
        "for an answer end unanswered and replies not yet sent to it are not sent; --dry-run says what "
        "would end and changes nothing."
    )

    def add_arguments(self, parser):
        sub = actions(parser)
        tenant_help = "the tenant's slug"
        code_help = "the 6-digit code the sender was sent"
        listing = sub.add_parser(
            "list", help="pending pairing requests (or, with --paired, paired accounts)",
            description="List the tenant's pending pairing requests: each unknown sender's channel, sender id, "
                        "name, code and when it expires. With --paired, the accounts paired now instead, with "
                        "their identity id (for `pair revoke --identity`) and whose they are.")
        listing.add_argument("--tenant", required=True, help=tenant_help)
        listing.add_argument("--paired", action="store_true", help="the accounts paired now, and whose they are")
        approve = sub.add_parser(
            "approve", help="approve a code",
            description="Admit the sender a pending code was issued to, on that code's channel only: linked to "
                        "--user, or to a new user made for them. Their messages from then on reach the Qor.")
        approve.add_argument("code", help=code_help)
        approve.add_argument("--tenant", required=True, help=tenant_help)
        approve.add_argument("--user", help="existing username to link the sender to (a member of the tenant)")
        deny = sub.add_parser(
            "deny", help="deny a code",
            description="Refuse the sender a pending code was issued to: the code ends and they are not paired.")
        deny.add_argument("code", help=code_help)
        deny.add_argument("--tenant", required=True, help=tenant_help)
        revoke = sub.add_parser(
            "revoke", help="end a paired account's pairing",
            description="Take a paired account's access away, as ending its pairing in the admin does: it is "
                        "denied from then on (with --unlink: unlinked from its person, a stranger who may ask for "
                        "a new code), its messages still waiting for an answer end unanswered and replies not yet "
                        "sent to it are not sent. Name it by CHANNEL SENDER_ID or by --identity ID.")
        revoke.add_argument("channel", nargs="?", help="the account's channel (telegram, whatsapp, …)")
        revoke.add_argument("sender_id", nargs="?", help="its sender id on that channel (see `pair list --paired`)")
        revoke.add_argument("--identity", type=int, help="the account's identity id instead (see `pair list --paired`)")
        revoke.add_argument("--tenant", required=True, help=tenant_help)
        revoke.add_argument("--unlink", action="store_true",
                            help="unlink it from its person instead of denying it: it may ask for a new code")
        revoke.add_argument("--dry-run", action="store_true", help="say what would end; change nothing")

    def handle(self, *args, **opts):
        try:
            tenant = tenant_get(slug=opts["tenant"])
        except NotFound as exc:
            raise CommandError(str(exc)) from None
        action = opts["action"]
        if action == "list" and opts["paired"]:
            self._paired(tenant)
            return
        if action == "revoke":
            self._revoke(tenant, opts)
            return
        if action == "list":
            self._pending(tenant)
            return
        try:
            if action == "approve":
                user = None
                if opts.get("user") is not None and not opts["user"].strip():  # `--user "$U"`, U unset
                    raise CommandError("--user needs a username; leave it out to make a new user for the sender")
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

    def _pending(self, tenant) -> None:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"Pending pairing requests of {tenant.slug}")
        # When a code expires, in the workspace's own time, which the column names.
        for col in ("code", "channel", "sender", "name", f"expires ({tenant.timezone})"):
            table.add_column(col)
        rows = pairing_pending(tenant=tenant)
        for r in rows:
            table.add_row(r.code, r.channel, r.external_id, r.identity.display_name,
                          r.expires_at.astimezone(ZoneInfo(tenant.timezone)).strftime("%Y-%m-%d %H:%M"))
        Console(file=self.stdout, width=100).print(table if rows else "No pending requests.")

    def _paired(self, tenant) -> None:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"Paired accounts of {tenant.slug}")
        for col in ("identity", "channel", "sender", "name", "user"):
            table.add_column(col)
        rows = pairing_paired(tenant=tenant)
        for identity in rows:
            table.add_row(str(identity.pk), identity.channel, identity.external_id, identity.display_name,
                          identity.user.get_username())
        Console(file=self.stdout, width=100).print(table if rows else "No paired accounts.")

    def _revoke(self, tenant, opts) -> None:
        by_id, channel, sender = opts["identity"], opts["channel"], opts["sender_id"]
        if (by_id is None) == (channel is None) or (channel is not None and sender is None):
            raise CommandError("name the account by either CHANNEL SENDER_ID or --identity ID")
        try:
            identity = paired_identity_get(tenant=tenant, identity_id=by_id, channel=channel or "",
                                           external_id=sender or "")
            account = f"{identity.channel}:{identity.external_id}"
            whose = identity.user.get_username()
            if opts["dry_run"]:
                messages, parts = pairing_end_preview(identity=identity)
                self.stdout.write(f"would {'unlink' if opts['unlink'] else 'revoke'} {account} (paired to {whose}): "
                                  f"{messages} waiting message(s) would end unanswered, {parts} reply part(s) "
                                  "would not be sent. Dry run: nothing changed.")
                return
            revoked = pairing_revoke(tenant=tenant, identity_id=identity.pk, unlink=opts["unlink"], via="cli")
        except NotFound as exc:
            raise CommandError(str(exc)) from None
        after = ("it is a stranger again and may ask for a new code" if opts["unlink"]
                 else "what it sends is not answered")
        self.stdout.write(self.style.SUCCESS(
            f"{'unlinked' if opts['unlink'] else 'revoked'} {account} (was paired to {revoked.username}): "
            f"{revoked.messages} waiting message(s) ended unanswered, {revoked.parts} reply part(s) not sent; "
            f"{after}."
        ))
