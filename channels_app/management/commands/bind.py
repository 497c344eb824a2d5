from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from channels_app.models import ChannelBinding
from qorven.runtime.arguments import actions
from tenancy.errors import NotFound
from tenancy.selectors import qor_get, tenant_get

if TYPE_CHECKING:
    from channels_app.adapters import Adapter
    from channels_app.adapters.base import AccountProblem

# The adapters (httpx, pydantic, …) are imported by the methods that use them, not as
# `qorven --help` reads this command's help.

# Each channel's line in `qorven bind --help` and in the list `qorven bind` alone prints.
ACCOUNT_HELP = {"email": "bind an email address", "sms": "bind an SMS number (Twilio)",
                "webchat": "embed a Qor's chat on a site of yours"}


class Command(BaseCommand):
    help = (
        "Bind a Qor to a platform account: `qorven bind <channel> --tenant T --qor Q` plus the "
        "platform's credentials (see `qorven bind <channel> --help`). Running it again updates "
        "the binding. WhatsApp, Slack, Discord and SMS are asked first whether the credentials "
        "control the account the webhooks will name (--no-check skips that, offline, on your word); "
        "nothing is saved unless they do. Secrets you pass are stored in the database and never "
        "printed; a webchat signing secret Qorven generates for you is shown once."
    )

    def add_arguments(self, parser):
        from channels_app.adapters import ADAPTERS
        from channels_app.adapters.base import proves_account

        sub = actions(parser, dest="kind", metavar="channel")
        for kind, adapter in sorted(ADAPTERS.items()):
            p = sub.add_parser(
                kind, help=ACCOUNT_HELP.get(kind, f"bind {'an' if kind[0] in 'aeiou' else 'a'} {kind} account"),
                description=(f"Bind a Qor to {'an' if kind[0] in 'aeiou' else 'a'} {kind} account with the "
                             "credentials below, or update its binding when run again; then prints what to "
                             f"set up on the {kind} side (the addresses are made from QORVEN_PUBLIC_URL)."
                             if kind != "webchat" else
                             "Create a webchat embed of a Qor for a site of yours, or update it when run "
                             "again; then prints the script tag to put on the site and how the site signs "
                             "its visitors' tokens (the addresses are made from QORVEN_PUBLIC_URL)."))
            p.add_argument("--tenant", required=True, help="tenant slug")
            p.add_argument("--qor", required=True, help="Qor slug")
            p.add_argument("--name", default="", help="a label for this binding")
            p.add_argument(
                "--unpaired", choices=ChannelBinding.UnpairedResponse.values, default=None,
                help="what unknown senders get: a pairing code (code, the default), silence with a code "
                     "(silent), or nothing (ignore). Running bind again without it keeps the setting",
            )
            if adapter.groups:
                p.add_argument(
                    "--groups", choices=ChannelBinding.GroupAnswers.values, default=None,
                    help="whose mention or reply is answered in a group chat: only people paired with the Qor "
                         "(paired, the default) or anyone in the group, at public trust (anyone); others' "
                         "messages are kept as the group's context. Running bind again without it keeps the "
                         "setting",
                )
            for field, text in adapter.credentials.items():
                p.add_argument("--" + field.replace("_", "-"), dest=field, default="", help=text,
                               required=field in adapter.required)
            if proves_account(adapter):
                p.add_argument("--no-check", action="store_true",
                               help=f"bind without asking {adapter.kind} to confirm the credentials control the "
                                    "account (offline; you vouch for them)")
            if hasattr(adapter, "webhook_register"):
                p.add_argument("--register-webhook", action="store_true",
                               help=f"also point the {kind} webhook at this server, at QORVEN_PUBLIC_URL (refused while "
                                    "it is unset: its default is this machine's, which no platform reaches)")

    def handle(self, *args, **opts):
        from channels_app.adapters import ADAPTERS
        from channels_app.adapters.base import SendError
        from channels_app.services import BindingError, binding_create

        kind = opts["kind"]
        try:
            tenant = tenant_get(slug=opts["tenant"])
            qor = qor_get(tenant=tenant, slug=opts["qor"])
        except NotFound as exc:
            raise CommandError(str(exc)) from None
        adapter = ADAPTERS[kind]
        if opts.get("register_webhook") and not settings.QORVEN_PUBLIC_URL_GIVEN:
            # Its default is this machine's loopback address: registered, the platform would
            # send every message there and none would arrive.
            raise CommandError(
                f"--register-webhook needs QORVEN_PUBLIC_URL, the https address {kind} reaches this server at "
                f"(e.g. https://qorven.example.com): it is unset, and {kind} cannot reach its default, "
                f"{settings.QORVEN_PUBLIC_URL}. Set it (in .env or the environment) and run this bind again; "
                "nothing was saved or registered.")
        credentials = {field: opts.get(field) or "" for field in adapter.credentials}
        if not opts.get("no_check"):
            unproven = _unproven(adapter, credentials)
            if unproven:
                hint = "" if unproven.refused else " (--no-check binds without asking, on your word.)"
                raise CommandError(unproven.text + hint)
        try:
            binding = binding_create(
                tenant=tenant, qor=qor, kind=kind, credentials=credentials, name=opts["name"],
                unpaired_response=opts["unpaired"], group_answers=opts.get("groups"),
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
                again = "" if exc.permanent else (
                    f" (run this bind again once {kind}'s API, {kind.upper()}_API_BASE, answers this server)")
                raise CommandError(f"the binding is saved, but the webhook is not registered: {exc}{again}") from None
            self.stdout.write(self.style.SUCCESS(f"webhook registered: {url}"))


def _unproven(adapter: Adapter, credentials: dict[str, str]) -> AccountProblem | None:
    """What the platform says against these credentials controlling the account; None when
    they are incomplete or misread, which binding_create refuses in its own words first."""
    from channels_app.adapters.base import proves_account

    if not proves_account(adapter):
        return None
    given = adapter.prepare_credentials({k: v for k, v in credentials.items() if v})
    if any(not given.get(k) for k in adapter.required) or adapter.credentials_problem(given):
        return None
    return adapter.account_proof(given)
