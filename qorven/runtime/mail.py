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


def mail_send_problem(exc: Exception) -> str:
    """What an error sending through the configured mail server means, in our words, with
    what to change in EMAIL_URL: never the password, and the server's reply only by its
    code (its text may quote what was sent)."""
    import smtplib
    import ssl

    where = f"{settings.EMAIL_HOST}:{settings.EMAIL_PORT}"
    if isinstance(exc, NoMailServerError):
        return f"no mail server is configured: set EMAIL_URL, e.g. {EMAIL_URL_EXAMPLE}"
    if isinstance(exc, smtplib.SMTPAuthenticationError):
        return (f"the mail server at {where} refused the sign-in as {settings.EMAIL_HOST_USER!r} ({exc.smtp_code}): "
                "check the user name and password in EMAIL_URL")
    if isinstance(exc, smtplib.SMTPSenderRefused):
        return f"the mail server at {where} refused to send from {exc.sender!r} ({exc.smtp_code})"
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        refused = ", ".join(f"{address} ({code})" for address, (code, _) in exc.recipients.items())
        return f"the mail server at {where} refused every recipient: {refused}"
    if isinstance(exc, smtplib.SMTPNotSupportedError):
        if "STARTTLS" in str(exc).upper():
            return (f"the mail server at {where} does not offer STARTTLS, which EMAIL_URL asks for (smtp+tls:// or "
                    "smtps://): use smtp+ssl:// for a server that speaks TLS from the start (port 465), smtp:// for "
                    "one without TLS")
        return (f"the mail server at {where} offers no sign-in here, and EMAIL_URL names a user: use smtp+tls:// "
                "(most servers offer it only after STARTTLS), or leave the user and password out")
    if isinstance(exc, smtplib.SMTPResponseException):
        return f"the mail server at {where} refused the mail ({exc.smtp_code})"
    if isinstance(exc, smtplib.SMTPServerDisconnected):
        return (f"the mail server at {where} hung up before the mail was sent: check EMAIL_URL's port and scheme "
                "(smtp+ssl:// for port 465, smtp+tls:// for 587)")
    if isinstance(exc, smtplib.SMTPException):  # smtplib's own words, not the server's
        return f"the mail server at {where} could not be used: {exc}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"the mail server at {where} showed a certificate this machine does not trust "
                f"({str(exc.verify_message or exc.reason).rstrip('.')}): EMAIL_URL must name the host its certificate is for")
    if isinstance(exc, ssl.SSLError):
        return (f"TLS with the mail server at {where} failed ({exc.reason or type(exc).__name__}): check EMAIL_URL's "
                "scheme: smtp+tls:// asks for STARTTLS (port 587), smtp+ssl:// speaks TLS from the start (port 465)")
    if isinstance(exc, TimeoutError):
        return (f"the mail server at {where}, which EMAIL_URL names, did not answer in time: check its host and port, "
                "and the scheme (smtp+ssl:// for port 465, where TLS comes first)")
    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc) or type(exc).__name__  # "Connection refused", "Name or service not known"
        return (f"could not connect to the mail server at {where}, which EMAIL_URL names ({reason}): check its host "
                "and port, and that the server is up")
    return f"sending through the mail server at {where} failed ({type(exc).__name__})"
