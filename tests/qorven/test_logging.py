"""Log lines say which tenant, Qor, session and message they are about, as text or JSON,
and a key quoted in a provider's error is masked before it reaches the log."""
from __future__ import annotations

import io
import json
import logging

import pytest

from qorven.agent.tasks import agent_turn
from qorven.runtime.log_context import ContextFilter, JsonFormatter, log_context, log_person
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.models import Membership

from ..factories.tenancy import UserFactory
from ..fakes.model_server import error

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "sk-proj-Ab12cdEFghIJklMNopQRstUVwxyz"


@pytest.fixture
def console():
    """The console handler the settings configure, writing to a buffer for the test."""
    (handler,) = [h for h in logging.getLogger().handlers if any(isinstance(f, ContextFilter) for f in h.filters)]
    stream, formatter = io.StringIO(), handler.formatter
    old = handler.setStream(stream)
    yield handler, stream
    handler.setStream(old)
    handler.setFormatter(formatter)


def test_a_failed_turn_logs_its_ids_as_json_with_the_key_masked(world, model_server, console):
    handler, stream = console
    handler.setFormatter(JsonFormatter())
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="user", content="hello", channel="web", sender_name="Alice",
                   awaits_answer=True, notify=False, metadata={"trust": "owner"})
    model_server.add(error(401, f"Incorrect API key provided: {KEY}."))
    agent_turn.apply(args=(world.tenant_a.pk, session.pk))
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    (failed,) = [line for line in lines if line["logger"] == "qorven.agent.turns" and "not answered" in line["message"]]
    assert (failed["tenant"], failed["qor"], failed["session"], failed["seq"]) == (
        world.tenant_a.pk, world.qor_a.pk, session.pk, 1)
    assert failed["level"] == "WARNING"
    assert KEY not in stream.getvalue() and "cdEFghIJ" not in stream.getvalue()


def test_the_text_format_puts_the_ids_before_the_message(console):
    handler, stream = console
    with log_context(tenant=3, session=41):
        logging.getLogger("qorven.test").warning("with Bearer qv_abcdefghijklmnop inside")
    logging.getLogger("qorven.test").warning("outside")
    first, second = stream.getvalue().splitlines()
    assert first.endswith("qorven.test tenant=3 session=41 with Bearer qv_a… inside")
    assert second.endswith("qorven.test outside")


def test_a_token_in_a_request_line_is_masked(console):
    """An access log's line for a socket a page opened with its token in the URL (the
    widget's visitor token, an API token a script put there) keeps only the token's first
    characters."""
    handler, stream = console
    logging.getLogger("uvicorn.access").info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET",
                                            "/ws/chat/acme/aria/?token=qv_FvlOtSECRETSECRET&surface=tui", "1.1", 101)
    logging.getLogger("uvicorn.error").info("%s - %s [accepted]", "127.0.0.1:5",
                                            '"WebSocket /ws/webchat/wc_k/?visitor=eyJhbGciOiSECRETSECRET"')
    text = stream.getvalue()
    assert "SECRETSECRET" not in text
    assert "?token=qv_F…&surface=tui" in text and "?visitor=eyJh…" in text


def test_a_workers_log_is_ours_json_and_masked_once_celery_has_set_up_its_logging():
    """`qorven worker` and `qorven beat` let Celery set up logging as they start; it
    replaced the root logger's handler, and with it the JSON format, the ids and the
    masking of keys — in the processes where turns and model errors happen."""
    import os
    import subprocess
    import sys

    code = ("import django; django.setup()\n"
            "from qorven.celery import app\n"
            "app.log.setup_logging_subsystem(loglevel='WARNING', colorize=False)\n"
            "import logging; logging.getLogger('qorven.agent.turns').warning("
            "'not answered: Incorrect API key provided: sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX1234')\n")
    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**environment, "DJANGO_SETTINGS_MODULE": "qorven.settings",
                               "DJANGO_SECRET_KEY": "log-test", "QORVEN_LOG_FORMAT": "json"})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in (done.stdout + done.stderr).splitlines() if line.startswith("{")]
    (line,) = [x for x in lines if x["logger"] == "qorven.agent.turns"]
    assert "sk-proj-ABCDEFGH" not in line["message"] and "sk-proj…" in line["message"]


TELEGRAM_URL = "https://api.telegram.org/bot123456:AAHsecretSECRETsecretSECRET12345/sendMessage"


@pytest.mark.parametrize("formatter", [None, JsonFormatter()], ids=["text", "json"])
def test_a_traceback_quoting_a_key_or_a_bot_url_is_masked_in_either_format(console, formatter):
    """A platform's or provider's error raised with its URL or key in the text, logged with
    its traceback (logger.exception): the text format printed the traceback as it was."""
    handler, stream = console
    if formatter:
        handler.setFormatter(formatter)
    try:
        raise RuntimeError(f"POST {TELEGRAM_URL} failed, key {KEY}")
    except RuntimeError:
        logging.getLogger("qorven.test").exception("send failed")
    logging.getLogger("qorven.test").warning("where", stack_info=True)  # a source line quoting sk-proj-StackStack12
    text = stream.getvalue()
    assert "Traceback" in text and "Stack (most recent call last)" in text
    assert "AAHsecretSECRET" not in text and "cdEFghIJ" not in text and "StackStack" not in text
    assert "bot123456:…" in text and "sk-proj…" in text


def test_a_bot_token_written_out_bare_is_masked_and_times_and_ids_are_not(console):
    """A Telegram bot token is `<bot id>:<35 characters>`; it was masked only inside a
    URL (`bot<id>:…`), so an error or a note quoting the token itself printed it whole."""
    handler, stream = console
    log = logging.getLogger("qorven.test")
    log.warning("bot 123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw here")
    log.warning("token=%s;", "7012345678:AAE-x_yZ0123456789abcdefghijklmnopq")
    log.warning("at 12:30 session 41:7 message 2024-05-01T12:30:00Z id 123456789:42 run 1234:abc")
    first, second, third = stream.getvalue().splitlines()
    assert first.endswith("bot 123456789:… here")
    assert "AAE-x_yZ" not in second and "7012345678:…" in second
    assert third.endswith("at 12:30 session 41:7 message 2024-05-01T12:30:00Z id 123456789:42 run 1234:abc")


def test_an_address_or_phone_number_a_platform_quotes_in_its_error_is_masked(console):
    """A refused send logs the platform's answer, and SMTP servers and Twilio quote the
    recipient in it ("<priya@example.com>: Recipient address rejected", "The 'To' number
    +4915112345678 is not valid"): the person's address or number reached the log."""
    handler, stream = console
    log = logging.getLogger("channels_app.sending")
    log.warning("delivery of message %s part %s failed for good: %s", 7, 0,
                "SMTP: 550 b'5.1.1 <priya.k+trips@example.com>: Recipient address rejected'")
    log.warning("delivery of message %s part %s failed for good: %s", 8, 0,
                "400: The 'To' number +4915112345678 is not a valid phone number.")
    log.warning("message 9 at 2024-05-01 12:30:00+00:00, total +12345 tokens")
    first, second, third = stream.getvalue().splitlines()
    assert "priya" not in first and "<…@example.com>" in first
    assert "15112345678" not in second and "+49…" in second
    assert third.endswith("message 9 at 2024-05-01 12:30:00+00:00, total +12345 tokens")


def test_a_persons_platform_id_is_masked_where_the_log_knows_it_for_theirs_and_other_numbers_are_not(console):
    """A WhatsApp number comes without its +: masked inside `log_person` only, whole (not
    inside a longer number or id), and an id too short to tell from a seq is left."""
    handler, stream = console
    log = logging.getLogger("channels_app.sending")
    with log_person("15551234567", "42"):
        log.warning("message 41 part 0 at 1733420000 to 15551234567 (wamid.15551234567x, 155512345678): seq 42")
    log.warning("to 15551234567")
    first, second = stream.getvalue().splitlines()
    assert first.endswith("message 41 part 0 at 1733420000 to 15… (wamid.15551234567x, 155512345678): seq 42")
    assert second.endswith("to 15551234567")


def test_the_beat_logs_the_heartbeats_it_sends_not_qorvens_own_upkeep_every_15_seconds(console):
    """`make run` logged "Sending due task __qorven_sweep__" four times a minute, 5,760 lines
    a day of an operator's log, around the lines worth reading."""
    _, stream = console
    beat = logging.getLogger("celery.beat")
    level = beat.level
    beat.setLevel(logging.INFO)  # `qorven chat` run in this process before quietens "celery"
    try:
        beat.info("Scheduler: Sending due task %s (%s)", "__qorven_sweep__", "channels_app.sweep")
        beat.info("Scheduler: Sending due task %s (%s)", "heartbeat 2: acme/aria morning", "heartbeats_app.run")
        beat.warning("Scheduler: Sending due task %s failed", "__qorven_sweep__")
    finally:
        beat.setLevel(level)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert "heartbeat 2: acme/aria morning" in lines[0] and "failed" in lines[1]


# A client's error is a one-line warning: anyone can send a request with too many form
# fields, or open an admin page that is not theirs, and each logged an ERROR (or a
# WARNING) with Django's whole traceback, as noisy as a fault of ours.

def test_a_request_with_too_many_form_fields_is_answered_400_and_logged_as_one_warning_line(client, db, console,
                                                                                            caplog):
    _, stream = console
    fields = {f"field{n}": "x" for n in range(1001)}  # DATA_UPLOAD_MAX_NUMBER_FIELDS is 1000
    with caplog.at_level(logging.INFO):
        response = client.post("/accounts/login/", fields, REMOTE_ADDR="198.51.100.7")
    assert response.status_code == 400
    (record,) = [r for r in caplog.records if r.name.startswith("django.security")]
    assert record.name == "django.security.TooManyFieldsSent" and record.levelname == "WARNING"
    assert not any(r.levelno >= logging.ERROR for r in caplog.records)
    (line,) = stream.getvalue().splitlines()
    assert " WARNING django.security.TooManyFieldsSent " in line and "DATA_UPLOAD_MAX_NUMBER_FIELDS" in line
    assert "Traceback" not in stream.getvalue()


def test_a_refused_requests_line_names_its_method_path_and_client_as_the_access_log_does(client, db, console,
                                                                                        settings):
    """Which request it was and who sent it, as the access log's line for it reads: never
    its body (a password) nor its query (a token)."""
    _, stream = console
    fields = {f"field{n}": "x" for n in range(1001)}
    client.post("/accounts/login/?token=qv_FvlOtSECRETSECRET", fields, REMOTE_ADDR="198.51.100.7")
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = client.post("/accounts/login/", {"username": "alice", "password": "hunter2-" * 200},
                           REMOTE_ADDR="2001:db8::7")
    assert response.status_code == 400
    many, big = stream.getvalue().splitlines()
    assert many.split(" WARNING django.security.TooManyFieldsSent ")[1] == (
        '198.51.100.7 - "POST /accounts/login/" 400 '
        "The number of GET/POST parameters exceeded settings.DATA_UPLOAD_MAX_NUMBER_FIELDS.")
    assert big.split(" WARNING django.security.RequestDataTooBig ")[1] == (
        '2001:db8::7 - "POST /accounts/login/" 400 '
        "Request body exceeded settings.DATA_UPLOAD_MAX_MEMORY_SIZE.")
    assert "SECRET" not in stream.getvalue() and "hunter2" not in stream.getvalue()


def test_a_refused_path_is_written_escaped_on_its_one_line(client, world, console):
    """A path can hold any character, a carriage return included: it must not start a
    line of its own that reads as another record."""
    _, stream = console
    client.force_login(UserFactory(username="dana", is_staff=True, is_superuser=True))
    fields = {f"field{n}": "x" for n in range(1001)}
    client.post("/admin/qorven/membership/1%0D2026-01-01 ERROR qorven forged/change/", fields)
    (line,) = stream.getvalue().splitlines()
    assert line.endswith(' WARNING django.security.TooManyFieldsSent 127.0.0.1 - '
                         '"POST /admin/qorven/membership/1\\r2026-01-01 ERROR qorven forged/change/" 400 '
                         "The number of GET/POST parameters exceeded settings.DATA_UPLOAD_MAX_NUMBER_FIELDS.")


def test_an_admin_action_refused_403_is_one_warning_line_without_the_traceback(client, world, console):
    """A workspace's admin (not an owner) trying to make someone an owner."""
    _, stream = console
    dana = UserFactory(username="dana", is_staff=True)
    Membership.objects.create(tenant=world.tenant_a, user=dana, role="admin")
    client.force_login(dana)
    response = client.post("/admin/qorven/membership/add/",
                           {"tenant": world.tenant_a.pk, "username": "eve", "role": "owner"})
    assert response.status_code == 403
    (line,) = stream.getvalue().splitlines()
    assert line.endswith(' WARNING django.request 127.0.0.1 - "POST /admin/qorven/membership/add/" 403 '
                         "Forbidden (Permission denied): /admin/qorven/membership/add/")
    assert "Traceback" not in stream.getvalue()
