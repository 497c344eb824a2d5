from __future__ import annotations

import getpass
import io
import os
import secrets
import sys
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from channels_app.selectors import telegram_secret_of
from qorven.runtime.environment import http_url_check, public_url_check
from qorven.runtime.url_prefix import public_url_under
from tenancy.selectors import qor_get, tenant_get, tenant_only_slug
from tenancy.services import tenant_bootstrap_refusal


class Command(BaseCommand):
    help = (
        "Set up Qorven for a real model on a first run: ask for the model server (URL, key, model) and "
        "check it with one short request, "
        "write them to .env, or the file QORVEN_ENV_FILE names (mode 600, other lines kept), create the tenant, its Qor and the owner, and "
        "optionally bind a Telegram bot and register its webhook at this server. Every question has a "
        "flag; with --non-interactive nothing is asked and missing values are errors. Nothing is written "
        "when the model does not answer."
    )

    def add_arguments(self, parser):
        parser.add_argument("--non-interactive", action="store_true", help="ask nothing; take every value from flags")
        parser.add_argument("--model-url", default="", help="the OpenAI-compatible server, e.g. http://127.0.0.1:11434/v1")
        parser.add_argument("--api-key", default="", help="its API key (empty for servers that need none)")
        parser.add_argument("--model", default="", help="the model name, e.g. llama3.1")
        parser.add_argument("--tenant", default="", help="tenant slug (default: the only workspace there is, "
                                                            "e.g. the demo one make run made; else home)")
        parser.add_argument("--qor", default="", help="the Qor's slug (default: aria)")
        parser.add_argument("--owner", default="", help="the owner's username (default: admin)")
        parser.add_argument("--password", default="", help="the owner's password (asked for when interactive)")
        parser.add_argument("--public-url", default="", help="this server's public URL, for platform webhooks")
        parser.add_argument("--telegram-token", default="", help="a bot token from @BotFather: bind it and register "
                                                                 "its webhook")
        parser.add_argument("--env-file", default="", help="where to write the settings (default: the file "
                                                           "QORVEN_ENV_FILE names, else .env beside manage.py)")

    def handle(self, *args, **opts):
        ask = self._asker(opts["non_interactive"])
        model_url = ask("Model server URL", opts["model_url"], "--model-url", required=True)
        api_key = ask("API key (empty if none)", opts["api_key"], "--api-key", secret=True)
        model = ask("Model name", opts["model"], "--model", required=True)
        try:
            http_url_check("--model-url", model_url)
        except ImproperlyConfigured as exc:
            raise CommandError(f"{exc}; nothing was written.") from None
        self.stdout.write(f"Asking {model} at {model_url} for one word…")
        self._probe(model_url, api_key, model)
        self.stdout.write(self.style.SUCCESS("✓ the model answers"))

        # The workspace `make run` made, when it is the only one: not a second one beside it.
        tenant = ask("Tenant slug", opts["tenant"], "--tenant", default=tenant_only_slug() or "home")
        qor = ask("Qor slug", opts["qor"], "--qor", default="aria")
        owner = ask("Owner username", opts["owner"], "--owner", default="admin")
        password = ask("Owner password", opts["password"], "--password", secret=True, required=True)
        telegram = ask("Telegram bot token (empty: skip)", opts["telegram_token"], "--telegram-token", secret=True)
        public_url = ask("This server's public URL (empty: this machine's)", opts["public_url"], "--public-url",
                         required=bool(telegram))

        refusal = tenant_bootstrap_refusal(tenant_slug=tenant, qor_slug=qor, owner_username=owner, password=password)
        if refusal:  # bootstrap would refuse it after .env was written: setup would stop half done
            raise CommandError(f"{refusal}; nothing was written.")
        from channels_app.adapters import ADAPTERS  # here, not as `qorven --help` reads this command

        token_problem = ADAPTERS["telegram"].credentials_problem({"token": telegram}) if telegram else None
        if token_problem:  # as bind would refuse it, after .env and the workspace were written
            raise CommandError(f"--telegram-token {token_problem[1]}; nothing was written.")
        if public_url:
            try:
                public_url_check("the public URL (--public-url)", public_url)
                # Its path is the prefix from now on; under this run's prefix, it gets that one.
                prefix = settings.QORVEN_URL_PREFIX or urlsplit(public_url).path.rstrip("/")
                registered = public_url_under(public_url, prefix, var="the public URL (--public-url)")
            except ImproperlyConfigured as exc:
                raise CommandError(f"{exc}; nothing was written.") from None

        # The file the settings are read from: QORVEN_ENV_FILE's when it names one, else .env.
        env_file = Path(opts["env_file"] or settings.ENV_FILE or settings.BASE_DIR / ".env")
        values = {"OPENAI_BASE_URL": model_url, "OPENAI_API_KEY": api_key, "QORVEN_MODEL": model}
        if public_url:  # else the default follows the port the server is started on
            values["QORVEN_PUBLIC_URL"] = public_url
        refusal = env_file_refusal(env_file)
        if refusal:
            raise CommandError(f"--env-file {env_file}: {refusal}; nothing was written.")
        try:
            env_write(env_file, values)
        except OSError as exc:  # not ours to write (permissions), a disk full
            raise CommandError(f"--env-file {env_file}: cannot be written ({exc.strerror}); nothing was "
                               "written.") from None
        self.stdout.write(self.style.SUCCESS(f"✓ settings written to {env_file} (mode 600)"))
        call_command("bootstrap", tenant=tenant, qor=qor, owner=owner, password=password, stdout=self.stdout)
        if telegram:
            # This run registers the URL just written (given: bind registers no default).
            settings.QORVEN_PUBLIC_URL, settings.QORVEN_PUBLIC_URL_GIVEN = registered, True
            # --opt=value: a token or a generated secret may start with "-", which argparse
            # would read as an option.
            # The same bot bound before keeps its secret: `bind` updates that binding.
            bound_to = tenant_get(slug=tenant)
            secret = (telegram_secret_of(tenant=bound_to, qor=qor_get(tenant=bound_to, slug=qor), token=telegram)
                      or secrets.token_urlsafe(24))
            call_command("bind", "telegram", "--tenant", tenant, "--qor", qor, f"--token={telegram}",
                         f"--secret={secret}", "--register-webhook", stdout=self.stdout)
        self.stdout.write(f"\nDone. Start it with `.venv/bin/qorven serve` and sign in as {owner!r}; "
                          "`.venv/bin/qorven doctor` checks everything.")

    def _asker(self, non_interactive: bool):
        interactive = not non_interactive and sys.stdin.isatty()

        def ask(question: str, given: str, flag: str, *, default: str = "", secret: bool = False,
                required: bool = False) -> str:
            if given:
                return given
            if interactive:
                prompt = f"{question}{f' [{default}]' if default and not secret else ''}: "
                try:
                    answer = (getpass.getpass(prompt) if secret else input(prompt)).strip()
                except EOFError:  # Ctrl-D: the host gave up here; nothing is written before the last question
                    self.stdout.write("")
                    raise CommandError(f'No answer to "{question}" (end of input): nothing was written.') from None
                given = answer or default
            else:
                given = default
            if required and not given:
                raise CommandError(f"{question} is needed: pass {flag} (see `qorven setup --help`)")
            return given

        return ask

    def _probe(self, model_url: str, api_key: str, model: str) -> None:
        from qorven.llm import ModelError
        from qorven.llm.routes import model_probe

        try:
            model_probe(base_url=model_url, api_key=api_key, model=model)
        except ModelError as exc:
            raise CommandError(f"{model} at {model_url} did not answer ({exc.summary()}); nothing was written. "
                               "Check the URL (it usually ends in /v1), the key and the model name.") from None


def env_file_refusal(path: Path) -> str | None:
    """Why the settings cannot be written to `path` (a folder, or in a folder that does
    not exist), None when they can be tried."""
    if path.is_dir():
        return "is a folder: name the settings file in it, e.g. " + str(path / ".env")
    if not path.parent.is_dir():
        return f"no such folder {path.parent}"
    return None


def env_write(path: Path, values: dict[str, str]) -> None:
    """Set these variables in the env file, keeping its other lines; the file is made
    readable by its owner only, before anything is written to it."""
    lines = path.read_text().splitlines() if path.exists() else []
    kept = [line for line in lines if line.split("=", 1)[0].strip() not in values]
    out = io.StringIO()
    for line in kept:
        out.write(line + "\n")
    for name, value in values.items():
        out.write(f"{name}={value}\n")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(out.getvalue())
