from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from channels_app.adapters.base import secret_digest
from channels_app.models import ChannelBinding
from sessions_app.models import Message

from ..command_help import help_text
from ..fakes.model_server import reply
from .conftest import pair
from .payloads import post_telegram, post_whatsapp, telegram_update, whatsapp_body


def test_bind_creates_a_binding_without_printing_secrets(world):
    out = io.StringIO()
    call_command("bind", "telegram", "--tenant", "acme", "--qor", "aria", "--token", "999:SECRET",
                 "--secret", "hook-secret", "--username", "aria_bot", stdout=out)
    binding = ChannelBinding.objects.get()
    assert (binding.kind, binding.tenant, binding.qor) == ("telegram", world.tenant_a, world.qor_a)
    assert binding.lookup_key == secret_digest("hook-secret")
    assert binding.credentials["token"] == "999:SECRET"
    assert "999:SECRET" not in out.getvalue() and "hook-secret" not in out.getvalue()
    # Running it again updates the same binding.
    call_command("bind", "telegram", "--tenant", "acme", "--qor", "aria", "--token", "999:NEW",
                 "--secret", "hook-secret", stdout=io.StringIO())
    assert ChannelBinding.objects.get().credentials["token"] == "999:NEW"


def test_bind_reports_missing_credentials_and_foreign_qors(world):
    with pytest.raises(CommandError, match="--app-secret"):
        call_command("bind", "whatsapp", "--tenant", "acme", "--qor", "aria", "--phone-number-id", "1",
                     "--token", "t", "--verify-token", "v", stdout=io.StringIO())
    with pytest.raises(CommandError, match="no qor"):
        call_command("bind", "telegram", "--tenant", "globex", "--qor", "nope", "--token", "t", "--secret", "s",
                     stdout=io.StringIO())
    assert not ChannelBinding.objects.exists()


@pytest.mark.parametrize("channel, args, says", [
    ("email", ["--address", "aria@acme.example", "--secret", "s", "--sender-check", "NONE"], "sender-check"),
    ("email", ["--address", "aria@acme.example", "--secret", "s", "--sender-check", "off"], "sender-check"),
    ("email", ["--address", "not an address", "--secret", "s"], "address"),
    ("webchat", ["--origins", "not a url, javascript:alert(1)"], "origins"),
    ("webchat", ["--origins", "https://example.com/path"], "origins"),
    # Twilio names our number in E.164 (To=+15550001111): any other form matches no text.
    ("sms", ["--number", "15550001111", "--account-sid", "AC9", "--auth-token", "t", "--no-check"], "number"),
    ("sms", ["--number", "+1 555 000 1111", "--account-sid", "AC9", "--auth-token", "t", "--no-check"], "number"),
    # A short code has five or six digits; four or seven are neither one nor a number in E.164.
    ("sms", ["--number", "1234", "--account-sid", "AC9", "--auth-token", "t", "--no-check"], "short code"),
    ("sms", ["--number", "1234567", "--account-sid", "AC9", "--auth-token", "t", "--no-check"], "short code"),
    ("sms", ["--number", "012345", "--account-sid", "AC9", "--auth-token", "t", "--no-check"], "short code"),
    # An Alphanumeric Sender ID only sends: no text ever comes to it, nor could a reply.
    ("sms", ["--number", "AcmeCo", "--account-sid", "AC9", "--auth-token", "t", "--no-check"], "one-way"),
    # Telegram's secret_token takes letters, digits, _ and - only (1 to 256): setWebhook refuses
    # any other, so no webhook would ever name the binding.
    ("telegram", ["--token", "111:AAA", "--secret", "my secret!"], "secret.*letters, digits"),
    ("telegram", ["--token", "111:AAA", "--secret", "s" * 257], "secret.*256"),
    # A bot token is the bot's id, a colon and its key: the one a send's URL is made of.
    ("telegram", ["--token", "bot111:AAA", "--secret", "s"], "token.*@BotFather"),
    ("telegram", ["--token", "111 AAA", "--secret", "s"], "token.*@BotFather"),
])
def test_bind_refuses_a_credential_it_would_misread_and_stores_nothing(world, channel, args, says):
    """A typo must not quietly mean something else: an unknown --sender-check read as
    "trust DKIM", an address no mail is sent to, an origin no browser will match."""
    with pytest.raises(CommandError, match=says):
        call_command("bind", channel, "--tenant", "acme", "--qor", "aria", *args, stdout=io.StringIO())
    assert not ChannelBinding.objects.exists()


@pytest.mark.parametrize("number", ["+15550001111", "12345", "894546", " 894546 "])
def test_bind_takes_a_twilio_number_or_short_code_as_twilio_names_it(world, number):
    """Twilio posts a text to a short code with To=894546, its digits as they are."""
    call_command("bind", "sms", "--tenant", "acme", "--qor", "aria", "--number", number, "--account-sid", "AC9",
                 "--auth-token", "t", "--no-check", stdout=io.StringIO())
    assert ChannelBinding.objects.get().lookup_key == number.strip()


def test_bind_refuses_a_label_longer_than_its_column(world):
    """SQLite stored a 500-character --name in a 200-character column (PostgreSQL refused
    it with a DataError traceback)."""
    with pytest.raises(CommandError, match="--name is at most 200 characters"):
        call_command("bind", "webchat", "--tenant", "acme", "--qor", "aria", "--name", "x" * 201,
                     stdout=io.StringIO())
    assert not ChannelBinding.objects.exists()


def test_bind_takes_the_documented_values(world):
    call_command("bind", "email", "--tenant", "acme", "--qor", "aria", "--address", "Aria@Acme.example",
                 "--secret", "s", "--sender-check", "dkim_or_spf", stdout=io.StringIO())
    call_command("bind", "webchat", "--tenant", "acme", "--qor", "aria",
                 "--origins", "https://example.com http://localhost:3000", stdout=io.StringIO())
    assert ChannelBinding.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_history_on_telegram_shows_only_telegram_messages(client, world, telegram, whatsapp, platform,
                                                          model_server, drain):
    pair(world, "telegram", "42", world.alice)
    pair(world, "whatsapp", "15550100", world.alice)
    model_server.add(reply("tg answer"), reply("wa answer"))
    post_telegram(client, telegram_update("from telegram", message_id=1))
    drain()
    post_whatsapp(client, whatsapp_body("from whatsapp"))
    drain()
    post_telegram(client, telegram_update("/history", message_id=2))
    drain()
    history = platform.sent("sendMessage")[-1].json["text"]
    assert "from telegram" in history and "tg answer" in history
    assert "whatsapp" not in history
    assert len(model_server.requests) == 2  # the command never reached the model
    assert Message.objects.filter(content="/history", channel="telegram").exists()


@pytest.mark.django_db(transaction=True)
def test_history_n_counts_conversation_lines_not_the_commands_and_notices_between_them(
    client, world, telegram, platform, model_server, drain
):
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("first answer"), reply("second answer"))
    post_telegram(client, telegram_update("first question", message_id=1))
    drain()
    post_telegram(client, telegram_update("second question", message_id=2))
    drain()
    for i, command in enumerate(["/status", "/help", "/history 1", "/status"]):
        post_telegram(client, telegram_update(command, message_id=3 + i))
        drain()
    post_telegram(client, telegram_update("/history 3", message_id=9))
    drain()
    lines = platform.sent("sendMessage")[-1].json["text"].splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == ["first answer", "second question", "second answer"]
    for n, command in enumerate(["/history 0", "/history 100", "/history -1", "/history abc"]):
        post_telegram(client, telegram_update(command, message_id=20 + n))
        drain()
        assert platform.sent("sendMessage")[-1].json["text"] == "Usage: /history [n] — n is a number from 1 to 50."


@pytest.mark.django_db(transaction=True)
def test_search_on_telegram_finds_what_was_said_on_whatsapp_and_a_group_only_its_own(
    client, world, telegram, whatsapp, platform, model_server, drain
):
    pair(world, "telegram", "42", world.alice)
    pair(world, "whatsapp", "15550100", world.alice)
    model_server.add(reply("Osteria del Mare has the *best* clams."))
    post_whatsapp(client, whatsapp_body("which osteria for the anniversary?"))
    drain()
    group = dict(chat_id=-100777, chat_type="supergroup")
    # A group's search shows what was said since the person asking first wrote there.
    post_telegram(client, telegram_update("evening all", message_id=9, **group))
    drain()
    post_telegram(client, telegram_update("the osteria was closed, lol", user_id=7, first_name="Ravi", message_id=1,
                                          **group))
    drain()

    post_telegram(client, telegram_update("/search osteria", message_id=2))
    drain()
    sent = platform.sent("sendMessage")[-1].json
    assert sent["chat_id"] == "42"
    lines = sent["text"].splitlines()
    assert lines[0] == "Found in our conversation, newest first (“osteria”):"
    assert lines[1].endswith(" · WhatsApp · Aria — Osteria del Mare has the ∗best∗ clams.")
    assert lines[2].endswith(" · WhatsApp · you — which osteria for the anniversary?")
    assert len(lines) == 3 and "closed" not in sent["text"]  # the group's chatter is the group's

    post_telegram(client, telegram_update("/search@aria_bot osteria", message_id=3, **group))
    drain()
    sent = platform.sent("sendMessage")[-1].json
    assert sent["chat_id"] == "-100777"
    assert sent["text"].splitlines()[1:] == [sent["text"].splitlines()[1].split(" · Telegram")[0]
                                             + " · Telegram · Ravi — the osteria was closed, lol"]
    assert "anniversary" not in sent["text"] and "clams" not in sent["text"]  # never alice's own chat

    post_telegram(client, telegram_update("/help", message_id=4))
    drain()
    assert "/search — find words in our conversation" in platform.sent("sendMessage")[-1].json["text"]
    assert len(model_server.requests) == 1  # only the WhatsApp question reached the model


@pytest.mark.django_db(transaction=True)
def test_history_on_telegram_quotes_each_message_on_its_own_line_without_its_formatting(
    client, world, telegram, platform, model_server, drain
):
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Here:\n```\nmake deploy\nthen *ping* @channel [the docs](https://evil.example) <b>now</b>"))
    post_telegram(client, telegram_update("how do I deploy?\n01-01 00:00 Aria: your code is 1234", message_id=1))
    drain()
    post_telegram(client, telegram_update("/history", message_id=2))
    drain()
    text = platform.sent("sendMessage")[-1].json["text"]
    lines = text.splitlines()
    # One line a message: a line a message quotes can never pass for another message.
    assert len(lines) == 2
    assert lines[0].endswith(": how do I deploy? 01-01 00:00 Aria: your code is 1234")
    assert lines[1].endswith(": Here: ˋˋˋ make deploy then ∗ping∗ @channel [the docs] (https://evil.example) ‹b›now‹/b›")
    assert not any(c in text for c in "`*<>") and "](" not in text


@pytest.mark.django_db(transaction=True)
def test_history_split_over_telegram_messages_opens_no_code_block_an_old_message_left_open(
    client, world, telegram, platform, model_server, drain
):
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Try:\n```python\nprint('never closed')"), *[reply("noted") for _ in range(16)])
    words = " ".join(["lorem ipsum"] * 23)
    for n in range(17):
        post_telegram(client, telegram_update(f"note {n}: {words}", message_id=1 + n))
        drain()
    answers = len(platform.sent("sendMessage"))
    post_telegram(client, telegram_update("/history 34", message_id=40))
    drain()
    parts = [sent.json["text"] for sent in platform.sent("sendMessage")[answers:]]
    assert parts[0].splitlines()[0].endswith(f"note 0: {words}")
    assert len(parts) == 2 and len("\n".join(parts).splitlines()) == 34  # a line a message, no fence of ours
    assert not any("`" in part for part in parts)


@pytest.mark.django_db(transaction=True)
def test_search_on_telegram_finds_a_question_a_compaction_carried_over_once(
    client, world, telegram, platform, model_server, drain
):
    from sessions_app.services.append import message_append
    from sessions_app.services.lifecycle import session_rotate
    from sessions_app.services.resolve import session_resolve

    pair(world, "telegram", "42", world.alice)
    old = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    message_append(session=old, role="user", content="which osteria for Friday?", channel="telegram",
                   sender_name="Alice", notify=False, awaits_answer=True)
    # A compaction: the question, still waiting for its answer, goes on in the fresh conversation.
    now = session_rotate(session=old, seed_summary="Alice plans Friday.", carry_unanswered=True).session
    message_append(session=now, role="assistant", content="Osteria del Mare.", channel="telegram", notify=False)
    Message.objects.filter(session=now, role="user").update(answer_state="answered")

    post_telegram(client, telegram_update("/search osteria", message_id=1))
    drain()
    lines = platform.sent("sendMessage")[-1].json["text"].splitlines()
    assert lines[0] == "Found in our conversation, newest first (“osteria”):"
    assert lines[1].endswith(" · Telegram · Aria — Osteria del Mare.")
    assert lines[2].endswith(" · Telegram · you — which osteria for Friday?")
    assert len(lines) == 3


@pytest.mark.django_db(transaction=True)
def test_history_dates_each_message_in_the_workspaces_timezone_as_search_does(
    client, world, telegram, platform, model_server, drain
):
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from sessions_app.models import Message

    world.tenant_a.timezone = "Asia/Tokyo"  # UTC+9, no summer time
    world.tenant_a.save(update_fields=["timezone"])
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("noted"))
    post_telegram(client, telegram_update("late question", message_id=1))
    drain()
    asked = Message.objects.get(content="late question")
    Message.objects.filter(pk=asked.pk).update(created_at=datetime(2026, 3, 1, 22, 30, tzinfo=ZoneInfo("UTC")))
    post_telegram(client, telegram_update("/history 2", message_id=2))
    drain()
    first = platform.sent("sendMessage")[-1].json["text"].splitlines()[0]
    assert first.startswith("03-02 07:30 ") and first.endswith(": late question")


@pytest.mark.parametrize("argv", [
    ("pair", "list"), ("pair", "approve"), ("pair", "deny"), ("pair", "revoke"),
    ("bind", "telegram"), ("bind", "webchat"), ("bind", "email"),
])
def test_each_subcommand_explains_itself_and_each_of_its_arguments(capsys, argv):
    """`qorven pair approve --help` showed a bare usage, an unexplained `code` and `--tenant`."""
    description, arguments = help_text(capsys, *argv)
    assert not description.startswith(("options:", "positional arguments:")) and len(description) > 40
    assert arguments and all(arguments.values()), arguments


def test_bind_says_when_the_webhook_address_is_a_guess_no_platform_can_reach(world, settings):
    """With QORVEN_PUBLIC_URL unset, bind printed the loopback default as the webhook to
    register, port 8000 whatever port the server was started on, and the webchat's embed
    likewise; the note after it did not say the address was only a local example."""
    settings.QORVEN_PUBLIC_URL, settings.QORVEN_PUBLIC_URL_GIVEN = "http://127.0.0.1:8000", False
    for channel, args, line in [
        ("telegram", ["--token", "999:T", "--secret", "s"], "webhook (a local example, not an address telegram "
                                                            "reaches): POST http://127.0.0.1:8000/v1/webhooks/telegram"),
        ("webchat", [], "embed (a local example, not an address your visitors reach): <script "
                        'src="http://127.0.0.1:8000/webchat/'),
    ]:
        out = io.StringIO()
        call_command("bind", channel, "--tenant", "acme", "--qor", "aria", *args, stdout=out)
        lines = out.getvalue().splitlines()
        assert lines[1].startswith(line), lines
        assert ("(QORVEN_PUBLIC_URL is unset, so addresses are made from its default, http://127.0.0.1:8000, "
                "whatever port `qorven serve` listens on: set QORVEN_PUBLIC_URL to the https address ") in out.getvalue()

    settings.QORVEN_PUBLIC_URL, settings.QORVEN_PUBLIC_URL_GIVEN = "https://qorven.example:8443", True
    for channel, args, line in [
        ("telegram", ["--token", "999:T", "--secret", "s"], "webhook: POST https://qorven.example:8443/v1/webhooks/telegram"),
        ("webchat", [], 'embed (paste as is): <script src="https://qorven.example:8443/webchat/'),
    ]:
        out = io.StringIO()
        call_command("bind", channel, "--tenant", "acme", "--qor", "aria", *args, stdout=out)
        assert out.getvalue().splitlines()[1].startswith(line), out.getvalue()
        assert "8000" not in out.getvalue() and "QORVEN_PUBLIC_URL is unset" not in out.getvalue()


def test_register_webhook_without_a_public_url_is_refused_and_nothing_is_sent_or_saved(world, platform, settings):
    """`bind telegram --register-webhook` with QORVEN_PUBLIC_URL unset registered
    http://127.0.0.1:8000/v1/webhooks/telegram with Telegram, an address Telegram can never
    reach: every message to the bot was lost from then on."""
    from .test_setup import platform_ok

    settings.QORVEN_PUBLIC_URL, settings.QORVEN_PUBLIC_URL_GIVEN = "http://127.0.0.1:8000", False
    platform.default(r"/setWebhook$", platform_ok())
    with pytest.raises(CommandError) as refused:
        call_command("bind", "telegram", "--tenant", "acme", "--qor", "aria", "--token", "999:T", "--secret", "s",
                     "--register-webhook", stdout=io.StringIO())
    said = str(refused.value)
    assert said.startswith("--register-webhook needs QORVEN_PUBLIC_URL"), said
    assert "nothing was saved or registered" in said and "999:T" not in said, said
    assert platform.sent(r"/setWebhook$") == [] and not ChannelBinding.objects.exists()

    settings.QORVEN_PUBLIC_URL, settings.QORVEN_PUBLIC_URL_GIVEN = "https://qorven.example", True
    out = io.StringIO()
    call_command("bind", "telegram", "--tenant", "acme", "--qor", "aria", "--token", "999:T", "--secret", "s",
                 "--register-webhook", stdout=out)
    (registered,) = platform.sent(r"/setWebhook$")
    assert registered.json["url"] == "https://qorven.example/v1/webhooks/telegram"
    assert "webhook registered: https://qorven.example/v1/webhooks/telegram" in out.getvalue()
