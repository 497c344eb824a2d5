from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from qorven.runtime.arguments import actions
from tenancy.errors import InactiveUser, NotFound
from tenancy.models import ApiToken
from tenancy.selectors import tenant_get
from tenancy.services import api_token_create


MAX_DAYS = 36_500


class Command(BaseCommand):
    help = (
        "Manage API tokens. `token create --tenant T --user U` prints a new bearer token for "
        "user U in tenant T (shown once; only its digest is stored). Use it as "
        "'Authorization: Bearer <token>' on /v1/ endpoints. A deactivated user, or one who is not a "
        "member of the tenant, is refused and nothing is made."
    )

    def add_arguments(self, parser):
        sub = actions(parser)
        create = sub.add_parser(
            "create", help="mint a token for a member of a tenant",
            description="Print a new API bearer token for --user in --tenant, shown this once (only its digest is "
                        "stored). Use it as 'Authorization: Bearer <token>' on /v1/ endpoints (`qorven chat` needs "
                        "none: it makes its own each run); it works until revoked in the admin, or for --days "
                        "days.")
        create.add_argument("--tenant", required=True, help="tenant slug")
        create.add_argument("--user", required=True, help="username (must be a member of the tenant)")
        create.add_argument("--name", default="", help="a label to recognise the token by")
        create.add_argument("--days", type=int, default=None,
                            help="the token stops working after this many days (default: when revoked in the admin)")

    def handle(self, *args, **opts):
        days = opts["days"]
        if days is not None and not 1 <= days <= MAX_DAYS:
            raise CommandError(f"--days takes a whole number of days from 1 to {MAX_DAYS:,} (100 years)")
        longest = ApiToken._meta.get_field("name").max_length  # SQLite would keep more, PostgreSQL refuse it
        if longest is not None and len(opts["name"]) > longest:
            raise CommandError(f"--name is at most {longest} characters, got {len(opts['name'])}")
        try:
            tenant = tenant_get(slug=opts["tenant"])
        except NotFound as exc:
            raise CommandError(str(exc)) from None
        user = get_user_model().objects.filter(username=opts["user"]).first()
        if user is None:
            raise CommandError(f"no user {opts['user']!r}")
        try:
            expires_at = timezone.now() + timedelta(days=days) if days is not None else None
            _, raw = api_token_create(tenant=tenant, user=user, name=opts["name"], expires_at=expires_at)
        except NotFound:
            raise CommandError(f"{opts['user']!r} is not a member of tenant {opts['tenant']!r}") from None
        except InactiveUser:
            raise CommandError(f"{opts['user']!r} is deactivated: a token for them would be refused at every use "
                               "(activate the account in the admin first); no token made") from None
        self.stdout.write(raw)
