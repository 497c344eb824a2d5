"""The mail backend when no mail server is configured (EMAIL_URL unset).

It sends nothing and prints nothing: Django's console backend, the old default, printed
every email reply — its recipient, subject and text quoting the person — to the server's
output and counted it as sent. A send that must not fail silently raises `NoMailServer`,
which the email adapter turns into a permanent failure of the reply, shown as such.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core.mail.backends.base import BaseEmailBackend

BACKEND = "qorven.runtime.mail.NoMailServer"
EMAIL_URL_EXAMPLE = "smtp+tls://user:pass@smtp.example.com:587"
# Backends that deliver nowhere: they print or keep what is sent (`consolemail://`,
# `filemail://`, `memorymail://`, `dummymail://`). Fine on a developer's machine; doctor
# says so on a server.
NOWHERE = (
    "django.core.mail.backends.console.EmailBackend",
    "django.core.mail.backends.filebased.EmailBackend",
    "django.core.mail.backends.locmem.EmailBackend",
    "django.core.mail.backends.dummy.EmailBackend",
)


class NoMailServerError(Exception):
    """Mail was to be sent, and no mail server is configured."""


class NoMailServer(BaseEmailBackend):
    def send_messages(self, email_messages: Sequence[Any]) -> int:
        if email_messages and not self.fail_silently:
            raise NoMailServerError("no mail server is configured (set EMAIL_URL)")
        return 0


def mail_server_problem() -> str:
    """Why mail sent now would reach nobody, or "" when a mail server is configured."""
    backend = settings.EMAIL_BACKEND
    if backend == BACKEND:
        return "no mail server is configured (EMAIL_URL is not set): email replies and codes fail"
    if backend in NOWHERE:
        return f"EMAIL_URL delivers nowhere ({backend.rsplit('.', 2)[-2]}): mail is printed or kept, not sent"
    return ""


SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
PROBE_TIMEOUT = 5.0  # seconds for the mail server to answer `qorven doctor`


def mail_server_probe() -> tuple[bool, str]:
    """Ask the configured SMTP server what a send would: connect (TLS as configured) and
    sign in when a user is set, then leave. (ok, what was seen); the password never
    appears in it, and a server's reply only by its code."""
    import smtplib

    from django.core.mail import get_connection

    where = f"{settings.EMAIL_HOST}:{settings.EMAIL_PORT}"
    connection = get_connection(SMTP_BACKEND, timeout=PROBE_TIMEOUT, fail_silently=False)
    try:
        connection.open()
    except smtplib.SMTPAuthenticationError as exc:
        return False, f"the mail server at {where} refused the sign-in as {settings.EMAIL_HOST_USER!r} ({exc.smtp_code})"
    except smtplib.SMTPResponseException as exc:
        return False, f"the mail server at {where} refused us ({exc.smtp_code})"
    except (OSError, smtplib.SMTPException) as exc:
        return False, f"could not reach the mail server at {where} ({type(exc).__name__})"
    try:
        connection.close()
    except (OSError, smtplib.SMTPException):
        pass
    signed = f", signed in as {settings.EMAIL_HOST_USER!r}" if settings.EMAIL_HOST_USER else ""
    return True, f"replies go by smtp to {where} (it answered{signed})"
