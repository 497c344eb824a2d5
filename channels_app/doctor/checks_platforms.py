"""`qorven doctor`'s checks of each enabled channel binding: its stored credentials well
formed, then one real request to its platform (Telegram's getMe and getWebhookInfo, Slack's
auth.test, the WhatsApp phone number, Discord's bot user, Twilio's number; where email
replies go)."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
from django.conf import settings

from qorven.runtime.environment import url_without_credentials
from qorven.runtime.mail import EMAIL_URL_EXAMPLE, SMTP_BACKEND, mail_server_probe, mail_server_problem

from ..adapters import adapter_for
from ..adapters.base import platform_client
from ..adapters.sms import SHORT_CODE
from ..adapters.telegram import ALLOWED_UPDATES
from ..models import ChannelBinding
from .check import Check


def channel_checks() -> Iterator[Check]:
    probes = {"telegram": _telegram, "slack": _slack, "whatsapp": _whatsapp, "discord": _discord, "email": _email,
              "sms": _sms}
    bindings = ChannelBinding.objects.filter(enabled=True).select_related("tenant", "qor")
    for binding in bindings.order_by("tenant__slug", "kind", "pk"):
        subject = binding_named(binding)
        malformed = _malformed(binding, subject)
        if malformed is not None:
            yield malformed  # and its platform is not sent what could only be refused
            continue
        probe = probes.get(binding.kind)
        if probe is None:
            continue  # webchat has no account to ask
        for check in _safely(subject, binding.kind, lambda: probe(binding, subject)):
            yield check


def binding_named(binding: ChannelBinding) -> str:
    """A binding as its line names it: tenant/Qor, kind, its name when one was given (a
    binding is named after its kind by default) and its id, as the admin lists it."""
    name = f' "{binding.name}"' if binding.name and binding.name != binding.kind else ""
    return f"{binding.tenant.slug}/{binding.qor.slug} {binding.kind}{name} (binding {binding.pk})"


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
                 f"saved before its {option} was checked, and it is malformed: {option} {what}",
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
