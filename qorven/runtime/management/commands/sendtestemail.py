from __future__ import annotations

import smtplib
import socket
from email.utils import parseaddr
from typing import Any

from django.conf import settings
from django.core.mail import get_connection, mail_admins, mail_managers, send_mail
from django.core.management.base import CommandError, CommandParser
from django.core.management.commands import sendtestemail
from django.utils import timezone

from qorven.runtime.mail import SMTP_BACKEND, NoMailServerError, mail_send_problem

# Seconds each step with the mail server may take, unless EMAIL_URL gives ?timeout=:
# Django's default is none, and a server that drops packets held the command for minutes.
TIMEOUT = 10.0


class Command(sendtestemail.Command):
    """Django's sendtestemail (its arguments, its mail), with a mail that cannot leave said
    in one line, what failed and what to change in EMAIL_URL (it was a traceback), and a
    line saying where one that left went (it said nothing)."""

    help = (
        "Send a test email through EMAIL_URL's mail server to the addresses given: the server email replies and "
        "pairing codes go through. It says where the mail went, or in one line why it could not leave (the "
        "server not reached, the sign-in, the sender or the addresses refused) and what to fix. --from sends it "
        "from the address an email binding replies from, as its replies are."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--from", dest="sender", metavar="ADDRESS",
            help=f"the address to send it from (default: {settings.DEFAULT_FROM_EMAIL}, Django's DEFAULT_FROM_EMAIL; "
                 "an email binding's replies go from its own address, the only one some mail servers send from)",
        )

    def handle(self, *args: Any, **kwargs: Any) -> None:
        recipients, sender = kwargs["email"], kwargs["sender"]
        for address in (*recipients, *([sender] if sender is not None else [])):
            if parseaddr(address)[1] != address or "@" not in address.strip("@"):
                raise CommandError(f"{address!r} is not an email address (like you@example.com)")
        for option, setting in (("admins", "ADMINS"), ("managers", "MANAGERS")):
            if kwargs[option] and not getattr(settings, setting):
                raise CommandError(f"--{option} sends to Django's {setting}, which Qorven does not set: name the "
                                   "addresses to send to instead")
        sender = sender or settings.DEFAULT_FROM_EMAIL
        smtp = settings.EMAIL_BACKEND == SMTP_BACKEND
        connection = get_connection(fail_silently=False,
                                    **({"timeout": settings.EMAIL_TIMEOUT or TIMEOUT} if smtp else {}))
        subject = f"Test email from {socket.gethostname()} on {timezone.now()}"
        try:
            if recipients:
                send_mail(subject=subject, message="If you're reading this, it was successful.", from_email=sender,
                          recipient_list=recipients, connection=connection)
            if kwargs["managers"]:
                mail_managers(subject, "This email was sent to the site managers.", connection=connection)
            if kwargs["admins"]:
                mail_admins(subject, "This email was sent to the site admins.", connection=connection)
        except smtplib.SMTPSenderRefused as exc:
            raise CommandError(f"{mail_send_problem(exc)}: give --from an address it sends from (an email binding's "
                               "address, say); nothing was sent") from None
        except (NoMailServerError, OSError) as exc:  # smtplib's errors are OSErrors too
            raise CommandError(f"{mail_send_problem(exc)}; nothing was sent") from None
        where = f"{settings.EMAIL_HOST}:{settings.EMAIL_PORT}" if smtp else settings.EMAIL_BACKEND
        to = [*recipients, *(["MANAGERS"] if kwargs["managers"] else []), *(["ADMINS"] if kwargs["admins"] else [])]
        by = f" from {sender}" if recipients else ""  # Django's mail to ADMINS and MANAGERS is from SERVER_EMAIL
        self.stdout.write(f"sent a test email to {', '.join(to)}{by} through {where}")
