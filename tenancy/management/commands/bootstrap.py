from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from tenancy.services import tenant_bootstrap, tenant_bootstrap_refusal


class Command(BaseCommand):
    help = (
        "Create or update a tenant, its default Qor and its owner (staff who administers this "
        "tenant in the admin; --host-superuser makes them a superuser who sees every tenant). "
        "Safe to run again: existing rows are updated, never duplicated. "
        "Without --password a new owner cannot log in until you set one "
        "(qorven changepassword USER, or run it again with --password)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True, help="tenant slug, e.g. acme")
        parser.add_argument("--qor", required=True, help="slug of the tenant's default Qor, e.g. aria")
        parser.add_argument("--owner", required=True, help="username of the tenant's owner")
        parser.add_argument("--password", help="set the owner's password (kept unchanged when omitted)")
        parser.add_argument("--password-if-new", action="store_true",
                            help="set --password only when the owner is created (an existing owner keeps theirs)")
        parser.add_argument("--tenant-name", default="", help="display name of the tenant")
        parser.add_argument("--qor-name", default="", help="display name of the Qor")
        parser.add_argument("--host-superuser", action="store_true",
                            help="make the owner a superuser of the whole host (every tenant's data)")

    def handle(self, *args, **opts):
        from django.contrib.auth import get_user_model
        from django.core.exceptions import ValidationError

        User = get_user_model()
        password = opts["password"]
        if opts["password_if_new"] and User.objects.filter(**{User.USERNAME_FIELD: opts["owner"]}).exists():
            password = None
        refusal = tenant_bootstrap_refusal(tenant_slug=opts["tenant"], qor_slug=opts["qor"],
                                           owner_username=opts["owner"], password=password,
                                           tenant_name=opts["tenant_name"], qor_name=opts["qor_name"])
        if refusal:
            raise CommandError(refusal)
        try:
            result = tenant_bootstrap(
                tenant_slug=opts["tenant"],
                qor_slug=opts["qor"],
                owner_username=opts["owner"],
                password=password,
                tenant_name=opts["tenant_name"],
                qor_name=opts["qor_name"],
                host_superuser=opts["host_superuser"],
            )
        except ValidationError as exc:
            raise CommandError("--password: " + " ".join(exc.messages)) from None
        for what, obj in (("tenant", result.tenant), ("qor", result.qor), ("owner", result.owner)):
            verb = "created" if result.created[what] else "ok"
            self.stdout.write(f"{what:7} {obj}  ({verb})")
        if result.owner.is_superuser:
            self.stdout.write(f"owner   {result.owner} is a host superuser: the admin shows them every tenant")
        if password:
            self.stdout.write(f"owner   {result.owner}'s password is set")
        elif not result.owner.has_usable_password():
            self.stdout.write(self.style.WARNING(
                f"owner   {result.owner} has no password yet and cannot sign in: set one with "
                f"`qorven changepassword {result.owner}`, or run bootstrap again with --password"))
        self.stdout.write(self.style.SUCCESS("bootstrap complete"))

