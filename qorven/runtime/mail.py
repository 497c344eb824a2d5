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
