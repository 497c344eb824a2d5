from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from channels_app.adapters import ADAPTERS
from channels_app.adapters.base import SendError
from channels_app.models import ChannelBinding
from channels_app.services import BindingError, binding_create
from tenancy.errors import NotFound
from tenancy.selectors import qor_get, tenant_get


class Command(BaseCommand):
    help = (
        "Bind a Qor to a platform account: `qorven bind <channel> --tenant T --qor Q` plus the "
        "platform's credentials (see `qorven bind <channel> --help`). Running it again updates "
        "the binding. Secrets you pass are stored in the database and never printed; a webchat "
        "signing secret Qorven generates for you is shown once."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="kind", required=True, metavar="channel")
        for kind, adapter in sorted(ADAPTERS.items()):
            p = sub.add_parser(kind, help=f"bind {'an' if kind[0] in 'aeiou' else 'a'} {kind} account")
            p.add_argument("--tenant", required=True, help="tenant slug")
            p.add_argument("--qor", required=True, help="Qor slug")
            p.add_argument("--name", default="", help="a label for this binding")
            p.add_argument(
                "--unpaired", choices=ChannelBinding.UnpairedResponse.values, default="code",
                help="what unknown senders get: a pairing code (default), silence with a code, or nothing",
            )
            for field, text in adapter.credentials.items():
                p.add_argument("--" + field.replace("_", "-"), dest=field, default="", help=text,
                               required=field in adapter.required)
            if hasattr(adapter, "webhook_register"):
                p.add_argument("--register-webhook", action="store_true",
                               help=f"also point the {kind} webhook at this server (QORVEN_PUBLIC_URL)")

    def handle(self, *args, **opts):
        kind = opts["kind"]
        try:
            tenant = tenant_get(slug=opts["tenant"])
            qor = qor_get(tenant=tenant, slug=opts["qor"])
        except NotFound as exc:
            raise CommandError(str(exc)) from None
        credentials = {field: opts.get(field) or "" for field in ADAPTERS[kind].credentials}
        try:
            binding = binding_create(
                tenant=tenant, qor=qor, kind=kind, credentials=credentials, name=opts["name"],
                unpaired_response=opts["unpaired"],
            )
        except BindingError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"{kind} bound to {qor} (binding {binding.pk})"))
        for line in ADAPTERS[kind].setup_hint(binding, credentials):
            self.stdout.write(line)
        if opts.get("register_webhook"):
            try:
                url = ADAPTERS[kind].webhook_register(binding)
            except SendError as exc:
                raise CommandError(f"the binding is saved, but the webhook is not registered: {exc}") from None
            self.stdout.write(self.style.SUCCESS(f"webhook registered: {url}"))
