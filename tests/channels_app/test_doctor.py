"""`qorven doctor` against the fake model and platform servers: ✓ for what works, ✗ with
the fix for a refused bot token, a model server that is down and a webhook registered
nowhere."""
from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from channels_app.services import binding_create

from ..fakes.model_server import reply
from ..fakes.platform_server import Canned

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "111:AAA"


@pytest.fixture
def bot(world, settings):
    settings.QORVEN_PUBLIC_URL = "https://qorven.example"
    return binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                          credentials={"token": TOKEN, "secret": "tg-secret", "username": "aria_bot"})


def doctor(*args: str) -> tuple[dict, int]:
    out = io.StringIO()
    try:
        call_command("doctor", "--json", *args, stdout=out)
        code = 0
    except CommandError as exc:
        code = exc.returncode
    return json.loads(out.getvalue()), code


def checks_of(report: dict, area: str) -> list[dict]:
    return [c for c in report["checks"] if c["area"] == area]


def test_a_working_install_passes_every_check(world, bot, platform, model_server, settings):
    world.qor_b.delete()  # one Qor: the one the model server answers
    settings.QORVEN_MODEL = "scripted-model"
    model_server.default = reply("ok")
    platform.default(r"/getMe$", Canned(body={"ok": True, "result": {"username": "aria_bot"}}))
    platform.default(r"/getWebhookInfo$", Canned(body={"ok": True, "result": {
        "url": "https://qorven.example/v1/webhooks/telegram"}}))
    report, code = doctor()
    assert {c["area"] for c in report["checks"]} >= {"database", "model", "channel", "heartbeats", "skills"}
    if settings.REDIS_URL:  # scale-out: Redis is checked too; `check --deploy` judges the test settings
        assert [c["ok"] for c in checks_of(report, "redis")] == [True]
        assert all(c["ok"] for c in report["checks"] if c["area"] != "deploy"), report
    else:  # the embedded default: nothing else to run, nothing to deploy
        assert code == 0 and report["ok"], report
        assert not checks_of(report, "workers") and not checks_of(report, "deploy")
    (model,) = checks_of(report, "model")
    assert model["subject"] == "acme/aria" and "scripted-model" in model["detail"]
    assert len(model_server.requests) == 1
    assert [r.path for r in platform.sent(r"/bot")] == [f"/telegram/bot{TOKEN}/getMe",
                                                         f"/telegram/bot{TOKEN}/getWebhookInfo"]


def test_a_refused_token_a_dead_model_and_no_qor_model_each_fail_with_their_fix(world, bot, platform, settings):
    settings.OPENAI_BASE_URL, settings.QORVEN_MODEL = "http://127.0.0.1:9/v1", "gone-model"
    settings.QORVEN_MODEL_RETRIES = 0
    platform.default(r"/getMe$", Canned(status=401, body={"ok": False, "description": "Unauthorized"}))
    report, code = doctor()
    assert code == 1 and not report["ok"]
    (channel,) = checks_of(report, "channel")
    assert not channel["ok"] and "refused" in channel["detail"] and "@BotFather" in channel["fix"]
    models = checks_of(report, "model")
    assert [m["ok"] for m in models] == [False, False]
    assert all("gone-model at http://127.0.0.1:9/v1" in m["detail"] and m["fix"] for m in models)


def test_a_webhook_registered_elsewhere_fails_and_names_the_url_to_register(world, bot, platform):
    platform.default(r"/getMe$", Canned(body={"ok": True, "result": {"username": "aria_bot"}}))
    platform.default(r"/getWebhookInfo$", Canned(body={"ok": True, "result": {"url": ""}}))
    report, _ = doctor()
    token, webhook = checks_of(report, "channel")
    assert token["ok"] and not webhook["ok"]
    assert "not registered" in webhook["detail"] and "https://qorven.example/v1/webhooks/telegram" in webhook["fix"]
    assert "--register-webhook" in webhook["fix"]


def test_no_model_configured_is_a_failure_that_says_what_to_set(world, settings):
    settings.OPENAI_BASE_URL, settings.QORVEN_MODEL = "", ""
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("doctor", stdout=out)
    text = out.getvalue()
    assert "✗ model · acme/aria: no model configured" in text and "fix: run `qorven setup`" in text
    assert "or set OPENAI_BASE_URL" in text
    assert "✓ database" in text and "checks passed." in text


def test_whatsapp_and_discord_credentials_are_asked_of_their_platforms(world, platform):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="whatsapp", credentials={
        "phone_number_id": "1055", "token": "wa-token", "app_secret": "s", "verify_token": "v"})
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="discord", credentials={
        "application_id": "9001", "public_key": "00" * 32, "bot_token": "stale-bot-token"})
    platform.default(r"/whatsapp/v21.0/1055$", Canned(body={"id": "1055", "display_phone_number": "+1 555"}))
    platform.default(r"/users/@me$", Canned(status=401, body={"message": "401: Unauthorized"}))
    report, code = doctor()
    by_kind = {c["subject"].split(" ")[1]: c for c in checks_of(report, "channel")}
    assert by_kind["whatsapp"]["ok"] and "1055 answers" in by_kind["whatsapp"]["detail"]
    discord = by_kind["discord"]
    assert not discord["ok"] and "HTTP 401" in discord["detail"] and "developer portal" in discord["fix"]
    assert code == 1
    (asked,) = platform.sent(r"/users/@me$")
    assert asked.headers.get("Authorization", asked.headers.get("authorization")) == "Bot stale-bot-token"


TWILIO_NUMBERS = r"/twilio/2010-04-01/Accounts/AC123/IncomingPhoneNumbers.json"


def test_an_sms_binding_is_asked_of_twilio(world, sms, platform):
    """SMS bindings were skipped as having "no account to ask"; Twilio has one."""
    platform.default(TWILIO_NUMBERS, Canned(body={"incoming_phone_numbers": [{"phone_number": "+15550001111"}]}))
    report, _ = doctor()
    (check,) = checks_of(report, "channel")
    assert check["subject"].startswith("acme/aria sms (binding ") and check["ok"], check
    assert check["detail"] == "the Twilio account AC123 has the number +15550001111"
    (asked,) = platform.sent(r"/twilio/")
    assert asked.path.endswith("IncomingPhoneNumbers.json?PhoneNumber=%2B15550001111")


def test_an_sms_binding_on_a_short_code_is_said_to_be_one(world, platform):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="sms",
                   credentials={"number": "894546", "account_sid": "AC123", "auth_token": "twilio-token"})
    platform.default(r"/twilio/2010-04-01/Accounts/AC123/SMS/ShortCodes.json",
                     Canned(body={"short_codes": [{"sid": "SC1", "short_code": "894546"}]}))
    report, _ = doctor()
    (check,) = checks_of(report, "channel")
    assert check["ok"] and check["detail"] == "the Twilio account AC123 has the short code 894546", check


BIND_SMS = "qorven bind sms --tenant acme --qor aria --number +15550001111"


@pytest.mark.parametrize("answer, says, fix", [
    (Canned(status=401, body={"code": 20003}), "Twilio did not accept this account SID and auth token.", BIND_SMS),
    (Canned(body={"incoming_phone_numbers": []}), "The Twilio account AC123 has no incoming number +15550001111.",
     BIND_SMS),
    (Canned(status=503, body={}), "Twilio could not confirm the account (HTTP 503)", "network access to the Twilio"),
])
def test_an_sms_binding_twilio_does_not_confirm_fails_with_the_fix(world, sms, platform, answer, says, fix):
    platform.default(TWILIO_NUMBERS, answer)
    report, code = doctor()
    (check,) = checks_of(report, "channel")
    assert not check["ok"] and check["detail"] == says and fix in check["fix"], check
    assert "twilio-token" not in json.dumps(report)
    assert code == 1


def test_doctor_reports_an_unreachable_database_and_the_rest_instead_of_a_traceback(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    qorven = Path(sys.executable).with_name("qorven")
    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    # A folder where the file should be: SQLite cannot open it. (A file in a folder that does
    # not exist is refused before any command runs, naming it: tests/qorven/test_relative_paths.py.)
    (tmp_path / "db.sqlite3").mkdir()
    done = subprocess.run(
        [str(qorven), "doctor"], capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2],
        env={**environment, "DJANGO_SECRET_KEY": "doctor-test", "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3"},
    )
    assert done.returncode == 1, done.stderr[-1500:]
    assert "Traceback" not in done.stderr + done.stdout
    assert "unreachable" in done.stdout and "not checked: the database is unreachable" in done.stdout


def test_an_email_binding_with_no_mail_server_fails_and_says_to_set_email_url(world, settings):
    """With no EMAIL_URL the email channel's replies went to the console as if sent; doctor
    said nothing. A mail server that prints or keeps mail delivers nowhere either."""
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="email",
                   credentials={"address": "aria@acme.example", "secret": "mail-secret"})
    for backend, ok, seen in [("qorven.runtime.mail.NoMailServer", False, "no mail server is configured"),
                              ("django.core.mail.backends.console.EmailBackend", False, "delivers nowhere")]:
        settings.EMAIL_BACKEND = backend
        settings.EMAIL_HOST, settings.EMAIL_PORT = "smtp.example.com", 587
        (check,) = [c for c in checks_of(doctor()[0], "channel") if c["subject"].startswith("acme/aria email")]
        assert check["ok"] is ok and seen in check["detail"], check
        assert "EMAIL_URL" in check["fix"]


def test_an_email_binding_is_checked_against_its_mail_server(world, settings):
    """doctor said a configured mail server was fine without asking it: a wrong port, a
    server that is down or a refused password showed only when a reply failed."""
    from ..fakes.smtp_server import smtp_server

    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="email",
                   credentials={"address": "aria@acme.example", "secret": "mail-secret"})
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_USE_TLS, settings.EMAIL_USE_SSL = "127.0.0.1", False, False
    settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = "aria", "hunter2-password"

    def email_check() -> dict:
        (check,) = [c for c in checks_of(doctor()[0], "channel") if c["subject"].startswith("acme/aria email")]
        assert "hunter2" not in json.dumps(check)
        return check

    with smtp_server() as port:
        settings.EMAIL_PORT = port
        check = email_check()
        assert check["ok"] and f"127.0.0.1:{port}" in check["detail"] and "signed in" in check["detail"], check
    with smtp_server(AUTH=b"535 5.7.8 Authentication credentials invalid\r\n") as port:
        settings.EMAIL_PORT = port
        check = email_check()
        assert not check["ok"] and "refused the sign-in" in check["detail"] and "535" in check["detail"], check
        assert "EMAIL_URL" in check["fix"]
    # Nothing listens there any more.
    check = email_check()
    assert not check["ok"] and "could not reach" in check["detail"], check
    assert "EMAIL_URL" in check["fix"]


def test_a_webhook_registered_before_edits_were_asked_for_fails_and_gives_the_command_that_fixes_it(
        world, bot, platform):
    """A webhook registered by an earlier version asked for new messages only: Telegram
    sends it no edits, so a mention added to a group message by editing it is never seen."""
    platform.default(r"/getMe$", Canned(body={"ok": True, "result": {"username": "aria_bot"}}))
    platform.default(r"/getWebhookInfo$", Canned(body={"ok": True, "result": {
        "url": "https://qorven.example/v1/webhooks/telegram", "allowed_updates": ["message"]}}))
    report, code = doctor()
    assert code == 1
    token, webhook = checks_of(report, "channel")  # still one line for the webhook
    assert token["ok"] and not webhook["ok"]
    assert "edited_message" in webhook["detail"]
    assert webhook["fix"].startswith("run `qorven bind telegram --tenant acme --qor aria --token <bot token> "
                                     "--secret <secret> --register-webhook`")
    assert TOKEN not in webhook["fix"] and "tg-secret" not in webhook["fix"]
    assert [r.path for r in platform.sent(r"/bot")] == [f"/telegram/bot{TOKEN}/getMe",
                                                         f"/telegram/bot{TOKEN}/getWebhookInfo"]


@pytest.mark.parametrize("allowed", [None, [], ["message", "edited_message", "callback_query"]])
def test_a_webhook_that_receives_edits_passes(world, bot, platform, allowed):
    """Telegram leaves allowed_updates out (or empty) when every usual kind is sent,
    edits included."""
    result = {"url": "https://qorven.example/v1/webhooks/telegram"}
    if allowed is not None:
        result["allowed_updates"] = allowed
    platform.default(r"/getMe$", Canned(body={"ok": True, "result": {"username": "aria_bot"}}))
    platform.default(r"/getWebhookInfo$", Canned(body={"ok": True, "result": result}))
    report, _ = doctor()
    assert [c["ok"] for c in checks_of(report, "channel")] == [True, True]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite is copied by SQLite itself: nothing to install")
def test_on_postgresql_doctor_says_whether_qorven_backup_can_run(world, monkeypatch, tmp_path):
    """`qorven backup` needs pg_dump of the server's major version or newer: doctor says so
    before the night the first backup fails."""
    report, _ = doctor()
    (found,) = pg_dump_checks(report)
    assert found["ok"] and "pg_dump" in found["detail"], found

    monkeypatch.setenv("PATH", str(tmp_path))  # a machine without PostgreSQL's client programs
    report, code = doctor()
    (missing,) = pg_dump_checks(report)
    assert not missing["ok"] and code == 1
    assert "pg_dump" in missing["detail"] and "postgresql-client" in missing["fix"]

    old = tmp_path / "pg_dump"  # a client older than the server: pg_dump refuses to dump
    old.write_text("#!/bin/sh\necho 'pg_dump (PostgreSQL) 9.6.24'\n")
    old.chmod(0o755)
    report, _ = doctor()
    (too_old,) = pg_dump_checks(report)
    assert not too_old["ok"] and "9.6" in too_old["detail"]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite is restored by a rename: nothing to install")
def test_on_postgresql_doctor_says_whether_qorven_restore_can_run(world, monkeypatch, tmp_path):
    """`qorven restore` runs pg_restore's script through psql: a machine with pg_dump alone
    can back up but not restore, and doctor says so before the day it is needed."""
    report, _ = doctor()
    assert [(c["subject"], c["ok"]) for c in checks_of(report, "backup") if c["subject"] != "schedule"] == [
        ("pg_dump", True), ("pg_restore", True), ("psql", True)]

    real = connection.pg_version // 10000
    dump = tmp_path / "pg_dump"
    dump.write_text(f"#!/bin/sh\necho 'pg_dump (PostgreSQL) {real}.1'\n")
    dump.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    report, code = doctor()
    found = {c["subject"]: c for c in checks_of(report, "backup")}
    assert found["pg_dump"]["ok"] and code == 1
    for program in ("pg_restore", "psql"):
        assert not found[program]["ok"] and program in found[program]["detail"], found
        assert "qorven restore" in found[program]["fix"] and "postgresql-client" in found[program]["fix"]


def pg_dump_checks(report: dict) -> list[dict]:
    return [c for c in checks_of(report, "backup") if c["subject"] == "pg_dump"]


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the embedded default's database")
def test_on_sqlite_doctor_says_only_whether_backups_are_scheduled(world):
    """SQLite copies itself: nothing to install. Backups are off until the host schedules them."""
    report, _ = doctor()
    (schedule,) = checks_of(report, "backup")
    assert schedule["subject"] == "schedule" and schedule["ok"] and schedule["detail"].startswith("off")
    assert "QORVEN_BACKUP_SCHEDULE" in schedule["detail"]


def test_a_suspended_workspaces_model_is_not_asked(world, model_server, settings):
    """`qorven doctor` asked every Qor's model, a suspended workspace's too: a call on its
    own route and key while the host has stopped serving it."""
    from tenancy.services import tenant_suspend

    world.qor_b.delete()
    settings.QORVEN_MODEL = "scripted-model"
    model_server.default = reply("ok")
    tenant_suspend(tenant=world.tenant_a)
    report, _ = doctor()
    (model,) = checks_of(report, "model")
    assert (model["subject"], model["ok"]) == ("acme/aria", True) and "suspended" in model["detail"]
    assert model_server.requests == []


def test_a_model_url_with_credentials_is_named_without_them(world, model_server, settings):
    from tenancy.models import Qor

    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]
    settings.QORVEN_MODEL_RETRIES = 0
    model_server.default = reply("ok")
    answering = model_server.base_url.replace("://", "://aria:pw-answers-1234@")
    Qor.objects.filter(pk=world.qor_a.pk).update(main_base_url=answering, main_model="scripted-model")
    Qor.objects.filter(pk=world.qor_b.pk).update(main_base_url="http://bolt:pw-down-5678@127.0.0.1:9/v1",
                                                 main_model="gone-model")
    report, _ = doctor()
    models = {m["subject"]: m for m in checks_of(report, "model")}
    host = model_server.base_url.split("://")[1]
    assert models["acme/aria"]["ok"] and f"at http://***@{host} answers" in models["acme/aria"]["detail"]
    down = models[f"{world.tenant_b.slug}/{world.qor_b.slug}"]
    assert not down["ok"] and "at http://***@127.0.0.1:9/v1" in down["detail"]
    assert "pw-answers-1234" not in json.dumps(report) and "pw-down-5678" not in json.dumps(report)
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("doctor", stdout=out)
    assert "pw-" not in out.getvalue() and "***@127.0.0.1:9" in out.getvalue()


def test_a_webhook_url_with_credentials_is_named_without_them(world, bot, platform, settings):
    settings.QORVEN_PUBLIC_URL = "https://ops:pw-public-42@qorven.example"
    platform.default(r"/getMe$", Canned(body={"ok": True, "result": {"username": "aria_bot"}}))
    platform.default(r"/getWebhookInfo$", Canned(body={"ok": True, "result": {
        "url": "https://old:pw-old-43@elsewhere.example/hook"}}))
    report, _ = doctor()
    (_, webhook) = checks_of(report, "channel")
    assert not webhook["ok"] and webhook["detail"] == (
        "webhook at https://***@elsewhere.example/hook, not at https://***@qorven.example/v1/webhooks/telegram")
    assert "pw-" not in json.dumps(report)


def test_doctor_names_the_database_it_checked(world, settings):
    """It said "sqlite: reachable" and nothing of which file (or which server and database):
    a host whose server opened another, empty database than they meant saw a ✓."""
    report, _ = doctor()
    (checked,) = checks_of(report, "database")
    name = connection.settings_dict["NAME"]
    if connection.vendor == "sqlite":
        assert checked["subject"] == f"SQLite file {name}"
    else:
        host, port = connection.settings_dict["HOST"], connection.settings_dict["PORT"]
        assert checked["subject"] == f"PostgreSQL database {name} on {host}:{port}"
        assert connection.settings_dict["PASSWORD"] not in checked["subject"] or not connection.settings_dict["PASSWORD"]


def test_an_offline_qors_fix_names_qorven_setup(world, settings):
    """The fix named three variables to set by hand; the quick start's way is `qorven setup`,
    which asks for them, checks the model and writes them."""
    settings.OPENAI_BASE_URL, settings.QORVEN_MODEL = "", ""
    report, code = doctor()
    assert code == 1
    fixes = {c["fix"] for c in checks_of(report, "model")}
    assert fixes == {"run `qorven setup` (it asks for the model server and checks it), or set OPENAI_BASE_URL, "
                     "OPENAI_API_KEY and QORVEN_MODEL (or the Qor's model in the admin)"}


def test_a_binding_saved_before_its_credentials_were_checked_is_named_and_its_platform_not_asked(
        world, bot, platform):
    """`qorven bind` and the admin refuse a bot token that is not one (bot111:…, a space in
    it), but a binding saved before they did keeps it until it is next changed: every send
    with it fails, and doctor sent it to Telegram and said only "the bot token is refused
    (HTTP 404)", naming neither what is wrong nor which binding."""
    from channels_app.models import ChannelBinding

    malformed = "bot111:AAA s3cret"
    ChannelBinding.objects.filter(pk=bot.pk).update(credentials={**bot.credentials, "token": malformed})
    sms = ChannelBinding.objects.create(tenant=world.tenant_b, qor=world.qor_b, kind="sms", lookup_key="555 0100",
                                        credentials={"number": "555 0100", "account_sid": "AC1", "auth_token": "t"})
    report, code = doctor()
    assert code == 1
    assert "s3cret" not in json.dumps(report)
    found = {c["subject"]: c for c in checks_of(report, "channel")}
    token, number = found[f"acme/aria telegram (binding {bot.pk})"], found[f"globex/aria sms (binding {sms.pk})"]
    assert not token["ok"] and token["detail"].startswith("saved before its --token was checked"), token
    assert "--token must be the bot token @BotFather gives" in token["detail"], token
    assert token["fix"].startswith("run `qorven bind telegram --tenant acme --qor aria --token <token> --secret <secret>`")
    assert "updates this binding" in token["fix"], token
    # What names the binding (an SMS number): bound again, it is a new binding, and this one is to go.
    assert not number["ok"] and "E.164" in number["detail"], number
    assert f"delete binding {sms.pk}" in number["fix"], number
    assert platform.sent(r"/bot") == [] and platform.sent(r"/twilio") == []  # neither is sent anywhere
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("doctor", stdout=out)
    assert "s3cret" not in out.getvalue() and f"channel · acme/aria telegram (binding {bot.pk}): saved" in out.getvalue()


def test_a_platform_address_that_answers_something_else_is_a_cross_for_that_binding_naming_the_setting(
        world, bot, platform):
    """TELEGRAM_API_BASE naming another web server (a proxy's page, say), or a Telegram
    answer without its result, ended every channel check at once in "could not be checked
    (JSONDecodeError)" or "(KeyError)", naming neither the binding nor the setting."""
    platform.default(r"/getMe$", Canned(raw=b"<html>It works!</html>", headers={"Content-Type": "text/html"}))
    binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="discord",
                   credentials={"application_id": "77", "bot_token": "discord-token", "public_key": "ab" * 32})
    platform.default(r"/users/@me$", Canned(body={"username": "aria"}))
    report, code = doctor()
    assert code == 1
    found = {c["subject"].split(" ")[1]: c for c in checks_of(report, "channel")}
    telegram = found["telegram"]
    assert not telegram["ok"] and "not the telegram API's" in telegram["detail"], telegram
    assert "TELEGRAM_API_BASE" in telegram["fix"], telegram
    assert found["discord"]["ok"], found  # the other bindings are still checked
    platform.default(r"/getMe$", Canned(body={"ok": True}))  # no result
    (telegram,) = [c for c in checks_of(doctor()[0], "channel") if c["subject"].startswith("acme/aria telegram")]
    assert not telegram["ok"] and "TELEGRAM_API_BASE" in telegram["fix"], telegram


def test_doctor_says_why_postgresql_refused_it_in_one_line_without_the_pool_retrying(tmp_path):
    """With PostgreSQL's port closed, doctor said "unreachable (OperationalError)" — not why
    (refused, a wrong password, no such database) — after 10 s of the connection pool's own
    tries, each a WARNING of two lines above the report (12 of them here)."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    qorven = Path(sys.executable).with_name("qorven")
    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    done = subprocess.run(
        [str(qorven), "doctor", "--json"], capture_output=True, text=True, timeout=120,
        cwd=Path(__file__).resolve().parents[2],
        env={**environment, "DJANGO_SECRET_KEY": "doctor-test",
             "DATABASE_URL": f"postgres://qorven:pg-s3cret@127.0.0.1:{port}/qorven"},
    )
    assert done.returncode == 1, done.stderr[-1500:]
    database = next(c for c in json.loads(done.stdout)["checks"] if c["area"] == "database")
    assert not database["ok"] and "Connection refused" in database["detail"], database
    assert "psycopg.pool" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-1500:]
    assert "pg-s3cret" not in done.stdout + done.stderr


def test_doctor_with_redis_away_says_to_fix_redis_not_to_start_workers_and_a_beat(tmp_path):
    """With Redis's port closed, the workers' and the beat's checks said to start a
    `qorven worker` and a `qorven beat`: they could not have been asked, and a worker
    started then only waits for the same Redis."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    qorven = Path(sys.executable).with_name("qorven")
    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    # A port bound and not listening, held for the whole run: connecting is refused, and no
    # server of a test running beside this one can be given the port meanwhile (a port let go
    # before the run was, once: "Connection closed by server").
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        done = subprocess.run(
            [str(qorven), "doctor", "--json"], capture_output=True, text=True, timeout=120,
            cwd=Path(__file__).resolve().parents[2],
            env={**environment, "DJANGO_SECRET_KEY": "doctor-test", "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3",
                 "REDIS_URL": f"redis://:redis-s3cret@127.0.0.1:{port}/0"},
        )
    assert done.returncode == 1, done.stderr[-1500:]
    checks = {c["area"]: c for c in json.loads(done.stdout)["checks"]}
    for area in ("redis", "workers", "beat"):
        assert not checks[area]["ok"] and "Connection refused" in checks[area]["detail"], checks[area]
        assert "REDIS_URL" in checks[area]["fix"] and "start" not in checks[area]["fix"], checks[area]
    assert "redis-s3cret" not in done.stdout + done.stderr


def test_doctor_on_a_database_not_migrated_says_so_for_what_it_did_not_check(tmp_path):
    """On a new database not migrated yet, the checks that read it said each "not
    checked: the database is unreachable", beside the database's own ✗ saying it answers
    and only its migrations are missing."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    qorven = Path(sys.executable).with_name("qorven")
    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    done = subprocess.run(
        [str(qorven), "doctor", "--json"], capture_output=True, text=True, timeout=120,
        cwd=Path(__file__).resolve().parents[2],
        env={**environment, "DJANGO_SECRET_KEY": "doctor-test", "DATABASE_URL": f"sqlite:///{tmp_path}/new.sqlite3"},
    )
    assert done.returncode == 1, done.stderr[-1500:]
    checks = json.loads(done.stdout)["checks"]
    assert "migration(s) not applied" in checks[0]["detail"], checks[0]
    skipped = [c for c in checks if c["subject"] == "-"]
    assert skipped and all(c["detail"] == "not checked: the database is not migrated"
                           and c["fix"] == "run `qorven migrate` first" for c in skipped), skipped


def test_every_deploy_issue_is_a_line_of_its_own_and_counted(world, settings):
    """The deploy check said "5 issue(s); first: ?: (security.W004) …" on one line: a short
    DJANGO_SECRET_KEY (W009), fourth of them, was never named, and the summary counted the
    five as one failed check."""
    from django.core.checks import run_checks

    settings.REDIS_URL = settings.REDIS_URL or "redis://127.0.0.1:9/0"  # not the embedded default: deploy is checked
    settings.SECRET_KEY = "short"
    settings.SECURE_HSTS_SECONDS, settings.SECURE_SSL_REDIRECT = 0, False
    settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE = False, False
    expected = {issue.id for issue in run_checks(include_deployment_checks=True) if not issue.is_silenced()}
    assert {"security.W004", "security.W008", "security.W009", "security.W012", "security.W016"} <= expected
    report, code = doctor()
    deploy = checks_of(report, "deploy")
    assert code == 1 and sorted(c["subject"] for c in deploy) == sorted(expected), deploy
    (secret,) = [c for c in deploy if c["subject"] == "security.W009"]
    assert not secret["ok"] and "SECRET_KEY" in secret["detail"] and "DJANGO_SECRET_KEY" in secret["fix"], secret
    assert len(secret["detail"]) <= 160 and "\n" not in secret["detail"], secret

    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("doctor", stdout=out)
    lines = out.getvalue().splitlines()
    assert len([line for line in lines if line.startswith("✗ deploy · security.")]) == len(expected), lines
    shown = [line for line in lines if line.startswith(("✓", "✗"))]
    failed = [line for line in shown if line.startswith("✗")]
    assert lines[-1] == f"{len(shown) - len(failed)} of {len(shown)} checks passed.", lines


def test_a_bindings_line_names_its_tenant_qor_kind_and_binding_once(world, bot, platform):
    """A binding's line read "acme/telegram telegram": its kind twice (the name a binding is
    given by default is its kind), neither its Qor nor which binding it was."""
    named = binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="discord", name="Support desk",
                           credentials={"application_id": "77", "bot_token": "discord-token", "public_key": "ab" * 32})
    platform.default(r"/getMe$", Canned(body={"ok": True, "result": {"username": "aria_bot"}}))
    platform.default(r"/getWebhookInfo$", Canned(body={"ok": True, "result": {
        "url": "https://qorven.example/v1/webhooks/telegram"}}))
    platform.default(r"/users/@me$", Canned(body={"username": "aria"}))
    out = io.StringIO()
    try:
        call_command("doctor", stdout=out)
    except CommandError:
        pass  # other checks (the model's) may fail here
    lines = [line for line in out.getvalue().splitlines() if " channel · " in line]
    assert lines == [
        f"✓ channel · acme/aria telegram (binding {bot.pk}): bot @aria_bot accepts its token",
        f"✓ channel · acme/aria telegram (binding {bot.pk}): webhook registered at "
        "https://qorven.example/v1/webhooks/telegram",
        f'✓ channel · globex/{world.qor_b.slug} discord "Support desk" (binding {named.pk}): bot aria accepts its token',
    ], lines
