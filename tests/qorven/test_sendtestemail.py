"""`qorven sendtestemail`, Django's command run through the mail server EMAIL_URL names: a
mail that cannot leave is one line saying why and what to fix, never a traceback, and
never the password EMAIL_URL carries."""
from __future__ import annotations

import io
import os
import subprocess

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ..fakes.smtp_server import smtp_server
from ..ports import free_port
from .test_cli import QORVEN, ROOT

PASSWORD = "s3cret-mail-password"


def sendtestemail(*args: str, environment: dict[str, str]) -> subprocess.CompletedProcess:
    kept = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "EMAIL_URL")}
    return subprocess.run([str(QORVEN), "sendtestemail", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, env={**kept, "DJANGO_SECRET_KEY": "cli-test", **environment})


def said(done: subprocess.CompletedProcess) -> str:
    """The one line a refused send prints (exit 1), else an assertion naming what it did."""
    assert done.returncode == 1, done.stderr[-1500:]
    assert "Traceback" not in done.stderr + done.stdout and PASSWORD not in done.stderr + done.stdout, done.stderr
    (line,) = done.stderr.strip().splitlines()
    return line


def test_a_mail_server_that_is_not_there_is_one_line_naming_its_address_not_a_traceback():
    """It ended in a ConnectionRefusedError traceback, EMAIL_URL's host named nowhere."""
    port = free_port()  # nothing listens there
    line = said(sendtestemail("you@example.com", environment={"EMAIL_URL": f"smtp://aria:{PASSWORD}@127.0.0.1:{port}"}))
    assert f"could not connect to the mail server at 127.0.0.1:{port}" in line and "EMAIL_URL" in line, line


def test_no_mail_server_configured_is_one_line_saying_to_set_email_url():
    """With EMAIL_URL unset it ended in a NoMailServerError traceback."""
    line = said(sendtestemail("you@example.com", environment={}))
    assert "no mail server is configured" in line and "set EMAIL_URL" in line and "nothing was sent" in line, line


@pytest.fixture
def mail(settings):
    """The settings EMAIL_URL=smtp://aria:…@127.0.0.1 gives, the port to be set by the test."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_USE_TLS, settings.EMAIL_USE_SSL = "127.0.0.1", False, False
    settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = "aria", PASSWORD
    return settings


def refusal(*args: str) -> str:
    with pytest.raises(CommandError) as refused:
        call_command("sendtestemail", *args, stdout=io.StringIO())
    assert PASSWORD not in str(refused.value)
    return str(refused.value)


def test_a_refused_sign_in_names_the_user_and_the_setting_to_fix(mail):
    with smtp_server(AUTH=b"535 5.7.8 Authentication credentials invalid\r\n") as port:
        mail.EMAIL_PORT = port
        said = refusal("you@example.com")
    assert f"127.0.0.1:{port} refused the sign-in as 'aria' (535)" in said and "EMAIL_URL" in said, said


def test_starttls_asked_of_a_server_that_does_not_offer_it_names_the_schemes_to_use(mail):
    mail.EMAIL_USE_TLS = True  # smtp+tls://, and the server offers no STARTTLS
    with smtp_server() as port:
        mail.EMAIL_PORT = port
        said = refusal("you@example.com")
    assert "does not offer STARTTLS" in said and "smtp://" in said and "smtp+ssl://" in said, said


def test_a_refused_sender_or_recipient_is_named_with_the_servers_code(mail):
    with smtp_server(MAIL=b"553 5.7.1 sender not allowed\r\n") as port:
        mail.EMAIL_PORT = port
        sender = refusal("you@example.com")
    with smtp_server(RCPT=b"550 5.1.1 no such user\r\n") as port:
        mail.EMAIL_PORT = port
        recipient = refusal("nobody@example.com")
    assert "refused to send from 'webmaster@localhost' (553)" in sender and "--from" in sender, sender
    assert "refused every recipient: nobody@example.com (550)" in recipient, recipient


def test_a_test_email_that_leaves_says_where_it_went_and_can_be_sent_from_the_bindings_address(mail):
    """Django's command said nothing at all when the mail had gone."""
    out = io.StringIO()
    with smtp_server() as port:
        mail.EMAIL_PORT = port
        call_command("sendtestemail", "you@example.com", "--from", "aria@acme.example", stdout=out)
    assert f"sent a test email to you@example.com from aria@acme.example through 127.0.0.1:{port}" in out.getvalue()


def test_an_address_that_is_not_one_or_admins_that_are_not_set_are_refused_before_sending(mail):
    """`--admins` sent nothing and said nothing: Qorven sets no ADMINS."""
    mail.EMAIL_PORT = free_port()  # nothing is asked
    assert "'you' is not an email address" in refusal("you")
    assert "'me@' is not an email address" in refusal("you@example.com", "--from", "me@")
    assert "--admins" in refusal("--admins") and "ADMINS" in refusal("--admins")
