"""`qorven setup`: from nothing to a Qor answering on Telegram in one command. The model
is checked before anything is written; the .env is the owner's only; the bot's webhook is
registered with its secret at this server."""
from __future__ import annotations

import io
import stat
from contextlib import nullcontext

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from channels_app.models import ChannelBinding
from channels_app.services import binding_create
from tenancy.models import Membership, Qor

from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db(transaction=True)


def setup(tmp_path, model_url: str, **flags: str) -> str:
    out = io.StringIO()
    args = ["--non-interactive", "--model-url", model_url, "--api-key", "sk-test", "--model", "scripted-model",
            "--password", "correct horse battery 9", "--env-file", str(tmp_path / ".env")]
    for name, value in flags.items():
        args += [f"--{name.replace('_', '-')}", value]
    call_command("setup", *args, stdout=out)
    return out.getvalue()


def test_setup_writes_a_private_env_makes_the_owner_and_registers_the_telegram_webhook(
        tmp_path, model_server, platform):
    (tmp_path / ".env").write_text("DJANGO_DEBUG=false\nQORVEN_MODEL=old-model\n")
    model_server.add(reply("ok"))
    platform.default(r"/setWebhook$", platform_ok())
    out = setup(tmp_path, model_server.base_url, tenant="home", qor="aria", owner="maya",
                telegram_token="222:BBB", public_url="https://qorven.example")

    env = tmp_path / ".env"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    lines = env.read_text().splitlines()
    assert "DJANGO_DEBUG=false" in lines and "QORVEN_MODEL=scripted-model" in lines
    assert f"OPENAI_BASE_URL={model_server.base_url}" in lines and "QORVEN_MODEL=old-model" not in lines
    assert Membership.objects.get(user__username="maya", tenant__slug="home").role == "owner"
    assert Qor.objects.filter(tenant__slug="home", slug="aria").exists()

    binding = ChannelBinding.objects.get(kind="telegram")
    (registered,) = platform.sent(r"/bot222:BBB/setWebhook$")
    assert registered.json["url"] == "https://qorven.example/v1/webhooks/telegram"
    assert registered.json["secret_token"] == binding.credentials["secret"] and len(binding.credentials["secret"]) > 20
    assert "webhook registered: https://qorven.example/v1/webhooks/telegram" in out
    assert "sk-test" not in out and "222:BBB" not in out and binding.credentials["secret"] not in out


def test_a_model_that_does_not_answer_writes_nothing(tmp_path, world):
    with pytest.raises(CommandError, match="did not answer.*nothing was written"):
        setup(tmp_path, "http://127.0.0.1:9/v1")
    assert not (tmp_path / ".env").exists()
    assert not Membership.objects.filter(user__username="admin").exists()


def test_a_model_url_that_is_not_an_http_url_is_said_so_not_unreachable(tmp_path, world):
    """--model-url 127.0.0.1:11434/v1 (no scheme) was asked for a word and reported
    "unreachable", which sent the host to check a server that was up."""
    with pytest.raises(CommandError, match="--model-url must be an http:// or https:// URL.*nothing was written"):
        setup(tmp_path, "127.0.0.1:11434/v1")
    assert not (tmp_path / ".env").exists()


def test_non_interactive_setup_names_the_missing_flag(tmp_path):
    with pytest.raises(CommandError, match="pass --model-url"):
        call_command("setup", "--non-interactive", "--env-file", str(tmp_path / ".env"), stdout=io.StringIO())


class ClosedTerminal(io.StringIO):
    """A terminal whose input has ended (Ctrl-D at the prompt)."""

    def isatty(self) -> bool:
        return True


def test_input_ending_at_a_question_stops_setup_and_writes_nothing(tmp_path, model_server, monkeypatch):
    """Ctrl-D at a question of an interactive setup ended in an EOFError traceback."""
    model_server.add(reply("ok"))
    monkeypatch.setattr("sys.stdin", ClosedTerminal(""))
    with pytest.raises(CommandError) as stopped:
        call_command("setup", "--model-url", model_server.base_url, "--api-key", "sk-test", "--model",
                     "scripted-model", "--env-file", str(tmp_path / ".env"), stdout=io.StringIO())
    assert str(stopped.value) == "No answer to \"Tenant slug\" (end of input): nothing was written."
    assert not (tmp_path / ".env").exists() and not Membership.objects.exists()


def test_bind_registers_the_webhook_of_an_existing_bot_and_prints_its_full_url(world, platform, settings):
    settings.QORVEN_PUBLIC_URL, settings.QORVEN_PUBLIC_URL_GIVEN = "https://qorven.example", True
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": "tg-secret-a"})
    platform.default(r"/setWebhook$", platform_ok())
    out = io.StringIO()
    call_command("bind", "telegram", "--tenant", "acme", "--qor", "aria", "--token", "111:AAA",
                 "--secret", "tg-secret-a", "--register-webhook", stdout=out)
    assert "webhook: POST https://qorven.example/v1/webhooks/telegram" in out.getvalue()
    assert platform.sent(r"/bot111:AAA/setWebhook$")[0].json["secret_token"] == "tg-secret-a"

    from ..fakes.platform_server import Canned

    platform.script(r"/setWebhook$", Canned(status=400, body={"ok": False, "description": "bad webhook: HTTPS"}))
    with pytest.raises(CommandError, match="saved, but the webhook is not registered.*HTTPS"):
        call_command("bind", "telegram", "--tenant", "acme", "--qor", "aria", "--token", "111:AAA",
                     "--secret", "tg-secret-a", "--register-webhook", stdout=io.StringIO())


def test_bind_with_telegram_unreachable_saves_the_binding_and_says_the_webhook_is_not_registered(world, settings):
    """A Telegram this server cannot reach (no network, a wrong TELEGRAM_API_BASE) ended
    `bind … --register-webhook`, and `setup` with it, in an httpx.ConnectError traceback."""
    from tests.ports import free_port

    settings.QORVEN_PUBLIC_URL, settings.QORVEN_PUBLIC_URL_GIVEN = "https://qorven.example", True
    settings.TELEGRAM_API_BASE = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(CommandError) as refused:
        call_command("bind", "telegram", "--tenant", "acme", "--qor", "aria", "--token", "111:AAA",
                     "--secret", "tg-secret-a", "--register-webhook", stdout=io.StringIO())
    said = str(refused.value)
    assert said.startswith("the binding is saved, but the webhook is not registered: Telegram unreachable"), said
    assert "TELEGRAM_API_BASE" in said and "run this bind again" in said and "111:AAA" not in said, said
    assert ChannelBinding.objects.get().credentials["token"] == "111:AAA"


def platform_ok():
    from ..fakes.platform_server import Canned

    return Canned(body={"ok": True, "result": True})


def test_running_setup_again_for_the_same_bot_updates_its_binding(tmp_path, model_server, platform):
    """Each run made up a new webhook secret, so a second run bound the same bot twice."""
    model_server.default = reply("ok")
    platform.default(r"/setWebhook$", platform_ok())
    setup(tmp_path, model_server.base_url, telegram_token="222:BBB", public_url="https://qorven.example")
    setup(tmp_path, model_server.base_url, telegram_token="222:BBB", public_url="https://bot.example.com")
    (binding,) = ChannelBinding.objects.filter(kind="telegram")
    first, second = platform.sent(r"/bot222:BBB/setWebhook$")
    assert first.json["secret_token"] == second.json["secret_token"] == binding.credentials["secret"]
    assert second.json["url"] == "https://bot.example.com/v1/webhooks/telegram"


def test_a_public_url_under_a_path_registers_the_webhook_under_it(tmp_path, model_server, platform):
    """Qorven under a path of a shared host: the path is its QORVEN_URL_PREFIX from then on."""
    model_server.default = reply("ok")
    platform.default(r"/setWebhook$", platform_ok())
    out = setup(tmp_path, model_server.base_url, telegram_token="222:BBB", public_url="https://example.org/qorven/")
    assert "QORVEN_PUBLIC_URL=https://example.org/qorven/" in (tmp_path / ".env").read_text().splitlines()
    (registered,) = platform.sent(r"/bot222:BBB/setWebhook$")
    assert registered.json["url"] == "https://example.org/qorven/v1/webhooks/telegram"
    assert "webhook registered: https://example.org/qorven/v1/webhooks/telegram" in out


def test_a_public_url_without_the_prefix_set_gets_it(tmp_path, model_server, platform, url_prefix):
    model_server.default = reply("ok")
    platform.default(r"/setWebhook$", platform_ok())
    setup(tmp_path, model_server.base_url, telegram_token="222:BBB", public_url="https://bot.example.com")
    (registered,) = platform.sent(r"/bot222:BBB/setWebhook$")
    assert registered.json["url"] == "https://bot.example.com/qorven/v1/webhooks/telegram"


def test_a_public_url_under_a_path_of_qorvens_own_is_refused_and_nothing_is_written(tmp_path, model_server):
    """It was written to .env, and every command after it stopped on it."""
    model_server.add(reply("ok"))
    for url, refusal in (("https://example.org/chat", "none of Qorven's own"),
                         ("https://example.org/qorven", "two different paths")):
        with pytest.raises(CommandError, match=refusal):
            with override_settings(QORVEN_URL_PREFIX="/assistant") if "two" in refusal else nullcontext():
                setup(tmp_path, model_server.base_url, public_url=url)
        assert not (tmp_path / ".env").exists()
    assert not Membership.objects.filter(user__username="admin").exists()


@pytest.mark.parametrize("flags, refusal", [
    ({"tenant": "Acme Inc"}, "--tenant must be a slug"),
    ({"owner": "bad name!"}, "--owner"),
    ({"password": "password"}, "--password"),
])
def test_a_workspace_bootstrap_would_refuse_is_refused_before_anything_is_written(tmp_path, model_server, flags,
                                                                                    refusal):
    """The model's settings were written to .env first, then bootstrap refused the tenant,
    owner or password: setup stopped half done, with settings written and no workspace."""
    model_server.add(reply("ok"))
    with pytest.raises(CommandError, match=refusal):
        setup(tmp_path, model_server.base_url, **flags)
    assert not (tmp_path / ".env").exists()
    assert not Membership.objects.exists()


@pytest.mark.parametrize("where, refusal", [
    ("missing/.env", "no such folder"),
    ("", "is a folder"),
])
def test_a_settings_file_that_cannot_be_written_is_refused_before_anything_is_written(tmp_path, model_server, where,
                                                                                    refusal):
    """--env-file in a folder that does not exist, or naming a folder, ended in a
    FileNotFoundError or IsADirectoryError traceback."""
    model_server.add(reply("ok"))
    out = io.StringIO()
    with pytest.raises(CommandError, match=f"--env-file .*{refusal}.*nothing was written"):
        call_command("setup", "--non-interactive", "--model-url", model_server.base_url, "--model", "scripted-model",
                     "--password", "correct horse battery 9", "--env-file", str(tmp_path / where), stdout=out)
    assert not (tmp_path / "missing").exists()
    assert not Membership.objects.exists()


def test_a_bot_token_that_is_not_one_is_refused_before_anything_is_written(tmp_path, model_server):
    """Setup wrote .env and made the workspace before bind refused the token, and the
    refusal named bind's --token, not the --telegram-token given to setup."""
    model_server.add(reply("ok"))
    with pytest.raises(CommandError, match="--telegram-token.*@BotFather.*nothing was written"):
        setup(tmp_path, model_server.base_url, telegram_token="my bot token", public_url="https://qorven.example")
    assert not (tmp_path / ".env").exists()
    assert not Membership.objects.exists()


def test_setup_without_a_public_url_leaves_the_default_unpinned(tmp_path, model_server):
    """It wrote QORVEN_PUBLIC_URL=http://127.0.0.1:8000, so `make run PORT=8080` and
    `qorven chat` went on pointing at port 8000."""
    model_server.add(reply("ok"))
    setup(tmp_path, model_server.base_url)
    assert "QORVEN_PUBLIC_URL" not in (tmp_path / ".env").read_text()


def test_make_runs_bootstrap_keeps_a_password_set_since(tmp_path):
    """`make run` bootstraps on every start with the demo password: the one chosen in
    `qorven setup` (or the admin) was silently put back to it."""
    from django.contrib.auth import get_user_model

    call_command("bootstrap", "--tenant", "demo", "--qor", "aria", "--owner", "admin",
                 "--password=first demo password 1", "--password-if-new", stdout=io.StringIO())
    admin = get_user_model().objects.get(username="admin")
    admin.set_password("chosen in setup 42")
    admin.save()
    call_command("bootstrap", "--tenant", "demo", "--qor", "aria", "--owner", "admin",
                 "--password=first demo password 1", "--password-if-new", stdout=io.StringIO())
    admin.refresh_from_db()
    assert admin.check_password("chosen in setup 42")


def test_binding_email_with_no_mail_server_warns_that_replies_will_fail(world, settings):
    settings.EMAIL_BACKEND = "qorven.runtime.mail.NoMailServer"
    out = io.StringIO()
    call_command("bind", "email", "--tenant", "acme", "--qor", "aria", "--address", "aria@acme.example",
                 "--secret", "mail-secret", stdout=out)
    assert "warning: no mail server is configured" in out.getvalue() and "set EMAIL_URL" in out.getvalue()

    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    out = io.StringIO()
    call_command("bind", "email", "--tenant", "acme", "--qor", "aria", "--address", "aria@acme.example",
                 "--secret", "mail-secret", stdout=out)
    assert "warning" not in out.getvalue()


def test_setup_writes_the_settings_file_qorven_env_file_names(tmp_path, model_server, settings):
    """With QORVEN_ENV_FILE naming the install's settings file, setup wrote the model to a
    .env beside manage.py, which no command reads then: the Qor stayed offline."""
    model_server.add(reply("ok"))
    (root := tmp_path / "root").mkdir()  # where a .env beside manage.py would go, not the checkout's
    settings.BASE_DIR, settings.ENV_FILE = root, str(tmp_path / "qorven.env")
    out = io.StringIO()
    call_command("setup", "--non-interactive", "--model-url", model_server.base_url, "--model", "scripted-model",
                 "--password", "correct horse battery 9", stdout=out)
    assert "QORVEN_MODEL=scripted-model" in (tmp_path / "qorven.env").read_text()
    assert f"settings written to {tmp_path / 'qorven.env'}" in out.getvalue() and list(root.iterdir()) == []


def test_setup_after_make_run_configures_the_demo_workspace_not_a_second_one(tmp_path, model_server):
    """`make run` made the workspace `demo`; `qorven setup` with its defaults made another,
    `home`, with the same Qor and owner names, the owner a member of both."""
    from tenancy.models import Tenant

    call_command("bootstrap", "--tenant", "demo", "--qor", "aria", "--owner", "admin",
                 "--password=first demo password 1", "--password-if-new", stdout=io.StringIO())
    model_server.add(reply("ok"))
    setup(tmp_path, model_server.base_url)
    assert list(Tenant.objects.values_list("slug", flat=True)) == ["demo"]
    assert Membership.objects.get(user__username="admin", tenant__slug="demo").role == "owner"


def test_setup_with_several_workspaces_and_none_named_makes_home(tmp_path, model_server):
    from tenancy.models import Tenant

    for slug in ("acme", "globex"):
        call_command("bootstrap", "--tenant", slug, "--qor", "aria", "--owner", f"{slug}-owner", stdout=io.StringIO())
    model_server.add(reply("ok"))
    setup(tmp_path, model_server.base_url)
    assert sorted(Tenant.objects.values_list("slug", flat=True)) == ["acme", "globex", "home"]
