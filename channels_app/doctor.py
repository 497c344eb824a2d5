"""`qorven doctor`: is this install able to work, and if not, what to do about it.

Each check answers ✓ or ✗ with what it saw and, on ✗, the fix. The model and platform
checks make one real request each (a one-word completion; Telegram's getMe and
getWebhookInfo, Slack's auth.test, the WhatsApp phone number, Discord's bot user, Twilio's incoming number): they
prove the credentials, not just that they are set. Nothing is changed anywhere.
"""
from __future__ import annotations

import io
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.management import call_command
from django.db import connections

from qorven.runtime.environment import url_without_credentials
from qorven.runtime.mail import EMAIL_URL_EXAMPLE, SMTP_BACKEND, mail_server_probe, mail_server_problem

from .adapters import adapter_for
from .adapters.base import platform_client
from .adapters.sms import SHORT_CODE
from .adapters.telegram import ALLOWED_UPDATES
from .models import ChannelBinding


@dataclass(frozen=True)
class Check:
    area: str  # database, redis, workers, beat, model, channel, heartbeats, skills, backup, deploy
    subject: str  # what was checked: a Qor, a binding, a file
    ok: bool
    detail: str  # what was seen
    fix: str = ""  # what to do, when not ok

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def doctor_checks(*, areas: frozenset[str] | None = None) -> list[Check]:
    """Every check (or those of `areas`), in the order a newcomer would fix them."""
    found: list[Check] = []
    database_down = False
    for area, probe in _PROBES:
        if areas is not None and area not in areas:
            continue
        if database_down and area in _NEEDS_DATABASE:
            found.append(Check(area, "-", False, "not checked: the database is unreachable", "fix the database first"))
            continue
        try:
            found.extend(probe())
        except Exception as exc:  # a check that fails to run is a ✗ of its own, never a crash
            found.append(Check(area, "-", False, f"could not be checked ({type(exc).__name__})",
                               "fix what the checks above report, then run `qorven doctor` again"))
        database_down = database_down or any(c.area == "database" and not c.ok for c in found)
    return found


def _guarded(area: str, subject: str, fix: str, probe: Callable[[], Check]) -> Check:
    try:
        return probe()
    except Exception as exc:  # a check that fails to run is a ✗ of its own, never a crash
        return Check(area, subject, False, f"{type(exc).__name__}: {str(exc)[:200]}", fix)


# --- the install -----------------------------------------------------------------------


def _database() -> Iterator[Check]:
    from django.db.migrations.executor import MigrationExecutor

    fix = "check DATABASE_URL and that the database server is up"
    try:
        connection = connections["default"]
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        executor = MigrationExecutor(connection)  # loads the migration graph once
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as exc:
        yield Check("database", _database_named(), False, f"unreachable ({type(exc).__name__})", fix)
        return
    if plan:
        yield Check("database", _database_named(), False, f"{len(plan)} migration(s) not applied",
                    "run `qorven migrate`")
    else:
        yield Check("database", _database_named(), True, "reachable, every migration applied")


def _database_named() -> str:
    """Which database this is, so a host sees the one they meant is the one checked."""
    from qorven.runtime.database import database_named

    return database_named()


def _redis() -> Iterator[Check]:
    if not settings.REDIS_URL:
        return  # the embedded default needs none

    def probe() -> Check:
        import redis

        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2).ping()
        return Check("redis", _host(settings.REDIS_URL), True, "answers")

    yield _guarded("redis", _host(settings.REDIS_URL), "check REDIS_URL and that Redis is up", probe)


def _workers() -> Iterator[Check]:
    from celery import current_app

    from qorven.runtime.worker import broker_is_embedded

    if broker_is_embedded(current_app):
        return  # tasks run inside `qorven serve`

    def probe() -> Check:
        replies = current_app.control.inspect(timeout=2.0).ping() or {}
        if not replies:
            return Check("workers", "celery", False, "no worker answered", "start one or more `qorven worker`")
        return Check("workers", "celery", True, f"{len(replies)} worker(s) answered: {', '.join(sorted(replies))}")

    yield _guarded("workers", "celery", "start one or more `qorven worker`", probe)


def _beats() -> Iterator[Check]:
    from celery import current_app

    from heartbeats_app.liveness import ALIVE_FOR, beats_alive
    from qorven.runtime.worker import broker_is_embedded

    if broker_is_embedded(current_app) or not settings.REDIS_URL:
        return  # `qorven serve` fires heartbeats itself

    def probe() -> Check:
        running = beats_alive()
        if not running:
            return Check("beat", "celery beat", False, f"no `qorven beat` reported in the last {ALIVE_FOR} s",
                         "start exactly one `qorven beat`: without it no heartbeat runs")
        if len(running) > 1:
            return Check("beat", "celery beat", False, f"{len(running)} beats running: {', '.join(running)}",
                         "stop all but one `qorven beat` (each sends every due heartbeat)")
        return Check("beat", "celery beat", True, f"one beat running: {running[0]}")

    yield _guarded("beat", "celery beat", "start exactly one `qorven beat`", probe)


# --- what answers ------------------------------------------------------------------------


def _models() -> Iterator[Check]:
    from qorven.llm import ModelError, provider_for, route_for
    from tenancy.access import tenant_serving
    from tenancy.models import Qor

    for qor in Qor.objects.select_related("tenant").order_by("tenant__slug", "slug"):
        subject = f"{qor.tenant.slug}/{qor.slug}"
        if not tenant_serving(qor.tenant):  # not served: no call on its route and key until it is resumed
            yield Check("model", subject, True, "workspace suspended: not asked")
            continue
        route = route_for(qor, "main")
        if route.offline:
            yield Check("model", subject, False, "no model configured: the offline provider answers",
                        "run `qorven setup` (it asks for the model server and checks it), or set OPENAI_BASE_URL, "
                        "OPENAI_API_KEY and QORVEN_MODEL (or the Qor's model in the admin)")
            continue
        # A stored URL may carry `user:password@` (a proxy in front of the model server):
        # doctor's output is pasted into issues and chats.
        where = f"{route.model} at {url_without_credentials(route.base_url)}"
        if route.from_qor:
            from qorven.runtime.outbound_transport import proxy_for

            proxy = proxy_for(route.base_url)
            where += f" through the proxy {proxy}" if proxy else ""
        try:
            provider_for(route).complete(messages=[{"role": "user", "content": "Reply with one word: ok"}])
        except ModelError as exc:
            yield Check("model", subject, False, f"{where}: {exc.summary()}",
                        "check that the server is up, the model name and the API key")
            continue
        yield Check("model", subject, True, f"{where} answers")


def _channels() -> Iterator[Check]:
    probes = {"telegram": _telegram, "slack": _slack, "whatsapp": _whatsapp, "discord": _discord, "email": _email,
              "sms": _sms}
    bindings = ChannelBinding.objects.filter(enabled=True).select_related("tenant", "qor")
    for binding in bindings.order_by("tenant__slug", "kind", "pk"):
        subject = f"{binding.tenant.slug}/{binding.kind}" + (f" {binding.name}" if binding.name else "")
        malformed = _malformed(binding, subject)
        if malformed is not None:
            yield malformed  # and its platform is not sent what could only be refused
            continue
        probe = probes.get(binding.kind)
        if probe is None:
            continue  # webchat has no account to ask
        for check in _safely(subject, binding.kind, lambda: probe(binding, subject)):
            yield check


def _malformed(binding: ChannelBinding, subject: str) -> Check | None:
    """A ✗ for a binding whose stored credentials `qorven bind` and the admin would refuse
    now (a bot token that is not one, an SMS number not in E.164): saved before they were
    checked, it keeps them until it is next changed. None when they are well formed."""
    adapter = adapter_for(binding.kind)
    credentials = {k: str(v) for k, v in binding.credentials.items()}
    problem = adapter.credentials_problem(credentials) if adapter is not None else None
    if adapter is None or problem is None:
        return None
    field, what = problem
    option = "--" + field.replace("_", "-")
    command = " ".join([f"qorven bind {binding.kind} --tenant {binding.tenant.slug} --qor {binding.qor.slug}",
                        *(f"--{name.replace('_', '-')} <{name.replace('_', ' ')}>" for name in adapter.required)])
    try:  # whether the binding is found by this credential: bound again with another, it is a new binding
        names_it = adapter.lookup_key({**credentials, field: credentials[field] + "x"}) != adapter.lookup_key(credentials)
    except KeyError:
        names_it = False
    after = (f", then delete binding {binding.pk} in the admin: its {option} is what finds it, so that makes a new one"
             if names_it else ", which updates this binding")
    return Check("channel", subject, False,
                 f"binding {binding.pk} (Qor {binding.qor.slug}) was saved before its {option} was checked, and it is "
                 f"malformed: {option} {what}",
                 f"run `{command}` with a well-formed {option}{after}")


# The setting naming each platform's API, for a binding whose platform is asked over HTTP.
API_BASES = {"telegram": "TELEGRAM_API_BASE", "slack": "SLACK_API_BASE", "whatsapp": "WHATSAPP_API_BASE",
             "discord": "DISCORD_API_BASE", "sms": "TWILIO_API_BASE"}


def _safely(subject: str, kind: str, probe: Callable[[], list[Check]]) -> list[Check]:
    try:
        return probe()
    except httpx.HTTPError as exc:
        return [Check("channel", subject, False, f"{kind} API unreachable ({type(exc).__name__})",
                      f"check this server's network access to the {kind} API")]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # not JSON, or not the platform's
        if kind not in API_BASES:
            raise
        # Another web server at that address (a proxy's page), or an answer of another shape:
        # this binding's ✗, not the end of every channel's check.
        setting = API_BASES[kind]
        where = url_without_credentials(str(getattr(settings, setting, "")))
        return [Check("channel", subject, False,
                      f"what answered at {where} is not the {kind} API's answer ({type(exc).__name__})",
                      f"check that {setting} is the {kind} API's address (or its proxy's), then run `qorven doctor` "
                      "again")]


def _telegram(binding: ChannelBinding, subject: str) -> list[Check]:
    base = f"{settings.TELEGRAM_API_BASE.rstrip('/')}/bot{binding.credentials.get('token', '')}"
    me = platform_client().get(f"{base}/getMe")
    if me.status_code != 200 or not me.json().get("ok"):
        return [Check("channel", subject, False, f"the bot token is refused (HTTP {me.status_code})",
                      "make a token with @BotFather, then `qorven bind telegram --tenant … --qor … --token …`")]
    checks = [Check("channel", subject, True, f"bot @{me.json()['result'].get('username', '?')} accepts its token")]
    expected = f"{settings.QORVEN_PUBLIC_URL.rstrip('/')}/v1/webhooks/telegram"
    info = platform_client().get(f"{base}/getWebhookInfo")
    result = (info.json().get("result") or {}) if info.status_code == 200 else {}
    url = result.get("url", "")
    # Left out (or empty) by Telegram when every usual kind of update is sent.
    missing = [kind for kind in ALLOWED_UPDATES if result.get("allowed_updates") and
               kind not in result["allowed_updates"]]
    # Compared as they are, shown without the credentials either may carry.
    shown, shown_expected = url_without_credentials(url), url_without_credentials(expected)
    if url == expected and missing:
        # Registered by an earlier version, which asked for new messages only.
        checks.append(Check("channel", subject, False,
                            f"webhook registered at {shown_expected}, but Telegram does not send it {', '.join(missing)}",
                            f"run `{_bind_again(binding)}` (the bot token and the secret this binding was bound "
                            "with) to register it again, asking for every update Qorven reads"))
    elif url == expected:
        checks.append(Check("channel", subject, True, f"webhook registered at {shown_expected}"))
    else:
        checks.append(Check("channel", subject, False,
                            f"webhook {'at ' + shown if url else 'not registered'}, not at {shown_expected}",
                            f"run `{_bind_again(binding)}` (the bot token and the secret this binding was bound "
                            f"with; QORVEN_PUBLIC_URL must be this server's public https URL, {shown_expected} is "
                            "where Telegram must send)"))
    return checks


def _bind_again(binding: ChannelBinding) -> str:
    """The `qorven bind` that registers the binding's webhook again (it keeps the binding's
    name and settings); its secrets as placeholders, never printed."""
    return (f"qorven bind telegram --tenant {binding.tenant.slug} --qor {binding.qor.slug} "
            "--token <bot token> --secret <secret> --register-webhook")


def _slack(binding: ChannelBinding, subject: str) -> list[Check]:
    token = binding.credentials.get("bot_token", "")
    answer = platform_client().post(f"{settings.SLACK_API_BASE.rstrip('/')}/auth.test",
                                    headers={"Authorization": f"Bearer {token}"})
    body = answer.json() if answer.status_code == 200 else {}
    if not body.get("ok"):
        return [Check("channel", subject, False, f"the bot token is refused ({body.get('error') or answer.status_code})",
                      "copy the Bot User OAuth Token of the Slack app and `qorven bind slack … --bot-token …`")]
    return [Check("channel", subject, True, f"bot {body.get('user', '?')} in {body.get('team', '?')} accepts its token")]


def _whatsapp(binding: ChannelBinding, subject: str) -> list[Check]:
    return _answers(subject, f"{settings.WHATSAPP_API_BASE.rstrip('/')}/{binding.lookup_key}",
                    f"Bearer {binding.credentials.get('token', '')}",
                    refused=f"phone number {binding.lookup_key} refused",
                    fix="check the phone number id and the access token in Meta's app dashboard",
                    seen=lambda body: f"phone number {binding.lookup_key} answers")


def _discord(binding: ChannelBinding, subject: str) -> list[Check]:
    return _answers(subject, f"{settings.DISCORD_API_BASE.rstrip('/')}/users/@me",
                    f"Bot {binding.credentials.get('bot_token', '')}", refused="the bot token is refused",
                    fix="reset the bot token in the Discord developer portal and `qorven bind discord …`",
                    seen=lambda body: f"bot {body.get('username', '?')} accepts its token")


def _sms(binding: ChannelBinding, subject: str) -> list[Check]:
    """The proof `qorven bind sms` asks for: the Twilio account owns the bound number."""
    adapter = adapter_for("sms")
    assert adapter is not None
    sid, number = binding.credentials.get("account_sid", ""), binding.lookup_key
    problem = adapter.account_proof(binding.credentials)
    if problem is None:
        what = "short code" if SHORT_CODE.fullmatch(number) else "number"
        return [Check("channel", subject, True, f"the Twilio account {sid} has the {what} {number}")]
    if not problem.refused:
        return [Check("channel", subject, False, f"Twilio could not confirm the account ({problem.why})",
                      "check this server's network access to the Twilio API, then run `qorven doctor` again")]
    return [Check("channel", subject, False, problem.text,
                  "check the number, account SID and auth token in Twilio's console, then `qorven bind sms "
                  f"--tenant {binding.tenant.slug} --qor {binding.qor.slug} --number {number} --account-sid <SID> "
                  "--auth-token <token>`")]


def _email(binding: ChannelBinding, subject: str) -> list[Check]:
    """Where replies go: the SMTP server, asked as a send would ask it (connected to,
    signed in to), or nowhere. Another backend is named, not contacted."""
    fix = f"set EMAIL_URL, e.g. {EMAIL_URL_EXAMPLE}"
    problem = mail_server_problem()
    if problem:
        return [Check("channel", subject, False, problem, fix)]
    if settings.EMAIL_BACKEND != SMTP_BACKEND:
        return [Check("channel", subject, True, f"replies go by {settings.EMAIL_BACKEND} (not contacted)")]
    ok, seen = mail_server_probe()
    return [Check("channel", subject, ok, seen, "" if ok else fix)]


def _answers(subject: str, url: str, authorization: str, *, refused: str, fix: str,
             seen: Callable[[dict[str, Any]], str]) -> list[Check]:
    """A GET that proves a credential: 200 is ✓ (`seen` describes the answer), else ✗."""
    answer = platform_client().get(url, headers={"Authorization": authorization})
    if answer.status_code != 200:
        return [Check("channel", subject, False, f"{refused} (HTTP {answer.status_code})", fix)]
    return [Check("channel", subject, True, seen(answer.json()))]


# --- files and settings -------------------------------------------------------------------


def _heartbeats() -> Iterator[Check]:
    from heartbeats_app.defaults.reading import DefaultsFileError
    from heartbeats_app.defaults.sync import beats_plan, defaults_path

    path = defaults_path()
    try:
        beats_plan(path=path)
    except DefaultsFileError as exc:
        first = exc.problems[0].render(str(path)) if exc.problems else str(exc)
        yield Check("heartbeats", path.name, False, f"{len(exc.problems)} problem(s); first: {first}",
                    "fix the file (`qorven sync-beats --dry-run` lists every problem)")
        return
    yield Check("heartbeats", path.name, True, "valid")


def _skills() -> Iterator[Check]:
    from memory_app.skills import SkillFileError, skills_dir, skills_sync

    try:
        report = skills_sync(dry_run=True)
    except SkillFileError as exc:
        yield Check("skills", str(skills_dir()), False, str(exc), "set QORVEN_SKILLS_DIR to the skills folder")
        return
    if report.errors:
        yield Check("skills", str(skills_dir()), False, f"{len(report.errors)} file(s) unreadable: {report.errors[0]}",
                    "fix them (`qorven sync-skills --dry-run` lists each)")
    else:
        yield Check("skills", str(skills_dir()), True, "every skill file reads")


def _deploy() -> Iterator[Check]:
    if connections["default"].vendor == "sqlite" and not settings.REDIS_URL:
        return  # the embedded default is for one machine, not a deployment
    out = io.StringIO()
    try:
        call_command("check", "--deploy", stdout=out, stderr=out)
    except Exception as exc:  # SystemCheckError: errors among them
        out.write(str(exc))
    text = out.getvalue()
    issues = [line for line in text.splitlines() if line.startswith("?:") or ": (" in line]
    if issues:
        yield Check("deploy", "check --deploy", False, f"{len(issues)} issue(s); first: {issues[0].strip()[:160]}",
                    "see `qorven check --deploy` and the README's production environment")
    else:
        yield Check("deploy", "check --deploy", True, "no issues")


def _backup() -> Iterator[Check]:
    """On PostgreSQL `qorven backup` runs pg_dump, which refuses a server newer than itself;
    then the scheduled backups (heartbeats_app.backup_report)."""
    from django.utils import timezone

    from heartbeats_app.backup_report import backup_schedule_report

    yield from _pg_dump()
    report = backup_schedule_report(now=timezone.now())
    yield Check("backup", "schedule", report.ok, report.detail, report.fix)


def _pg_dump() -> Iterator[Check]:
    """PostgreSQL's client programs `qorven backup` (pg_dump) and `qorven restore`
    (pg_restore, its script run by psql) need: found, and not older than the server."""
    connection = connections["default"]
    if connection.vendor != "postgresql":
        return  # SQLite copies and restores itself: nothing to install
    server = connection.pg_version // 10000
    for program, command in (("pg_dump", "qorven backup"), ("pg_restore", "qorven restore"),
                             ("psql", "qorven restore")):
        fix = (f"install PostgreSQL's client programs of version {server} or newer "
               f"(e.g. apt install postgresql-client), or `{command}` cannot run")
        found_at = shutil.which(program)
        if found_at is None:
            yield Check("backup", program, False, f"{program} was not found on PATH", fix)
            continue
        said = subprocess.run([found_at, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        found = re.search(r"(\d+)(?:\.(\d+))?", said)
        client = int(found.group(1)) if found else 0
        if client < server:
            yield Check("backup", program, False, f"{said or 'no version'}: older than the server ({server})", fix)
        else:
            yield Check("backup", program, True, f"{said}: `{command}` can run")


# What reads the database: not tried once it is unreachable (each would wait out the
# connection's timeout to say the same).
_NEEDS_DATABASE = frozenset({"model", "channel", "heartbeats", "skills", "backup"})
_PROBES: list[tuple[str, Callable[[], Iterator[Check]]]] = [
    ("database", _database), ("redis", _redis), ("workers", _workers), ("beat", _beats), ("model", _models),
    ("channel", _channels), ("heartbeats", _heartbeats), ("skills", _skills), ("backup", _backup), ("deploy", _deploy),
]


def _host(url: str) -> str:
    parts = urlsplit(url)
    return parts.hostname or url if parts.port is None else f"{parts.hostname}:{parts.port}"
