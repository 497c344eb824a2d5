"""Email through an inbound-parse webhook (JSON) and SMTP replies.

The webhook carries `from`, `to`, `subject`, `text`, `message_id`, `in_reply_to` and,
when the provider gives it, `references`; it is authenticated by a shared secret in
`X-Qorven-Email-Secret`. The binding is named by the address mail was sent to. Each
thread (the first of References, else In-Reply-To, else the message's own id) is its own
session. Credentials: `address`, `secret`, and optionally `sender_check`.

A From header proves nothing by itself, so an email sender carries at most paired trust
(tenancy.access) unless the inbound provider's verdict, passed in the payload's
`dkim` (`pass`, or SendGrid's `{@example.com : pass}`) and `spf` (`pass`) fields, proves
it. `sender_check` says which verdict counts: `dkim` (the default: a DKIM pass for the
From address's domain), `dkim_or_spf`, or `none` (never proven).
"""
from __future__ import annotations

import base64
import logging
import smtplib
from collections.abc import Hashable
from email.utils import getaddresses, parseaddr

from django.core.mail import BadHeaderError, EmailMessage
from django.http import HttpRequest

from qorven.runtime.mail import EMAIL_URL_EXAMPLE, NoMailServerError, mail_server_problem
from qorven.runtime.row_cache import NotCached, cached_only_reading, cached_only_stale

from ..json_body import json_body
from ..inbound import InboundImage, InboundMessage
from ..models import ChannelBinding
from ..uploads import MAX_FILES, UploadRefused, attachment_check
from .base import Adapter, Parsed, SendError, WebhookRejected, same_secret, webhook_bindings

logger = logging.getLogger(__name__)

# The addresses of an email's To and Cc looked for among the bindings, the first so many
# (a mailing list's copy names hundreds): one read, of a size every database takes.
MAX_ADDRESSES = 500
# The text of To and Cc read for them, at most (cut after the last whole address within
# it): Python's parser of addresses takes time with the text, whatever it holds, and
# anyone may post, before the secret is checked, on the event loop that screens every
# webhook (a megabyte of "@" took 1.5 s there, and as long again on the storing thread).
# MAX_ADDRESSES addresses of 32 characters; 25 ms at the most for the worst text.
MAX_ADDRESS_TEXT = 16_384
SEP = "\x1f"  # between the recipient, the thread and the subject in a reply target


SENDER_CHECKS = ("dkim", "dkim_or_spf", "none")


# One answer for an address nobody bound and a wrong secret, so that a prober cannot learn
# which addresses this server takes mail for; the log tells them apart.
REFUSED = "no email binding for these addresses with this X-Qorven-Email-Secret"


class EmailAdapter(Adapter):
    kind = "email"
    limit = 100_000
    credentials = {
        "address": "the address mail to this Qor is sent to",
        "secret": "the shared secret your inbound-parse provider sends in X-Qorven-Email-Secret",
        "sender_check": "which verdict of your inbound provider proves a sender: dkim (default), dkim_or_spf, none",
    }
    required = ("address", "secret")

    def lookup_key(self, credentials: dict[str, str]) -> str:
        return credentials["address"].strip().lower()

    def setup_hint(self, binding: ChannelBinding, given: dict[str, str]) -> list[str]:
        problem = mail_server_problem()
        warning = [f"warning: {problem}; set EMAIL_URL, e.g. {EMAIL_URL_EXAMPLE}"] if problem else []
        return [*super().setup_hint(binding, given), *warning]

    def credentials_problem(self, credentials: dict[str, str]) -> tuple[str, str] | None:
        address = credentials.get("address", "").strip()
        if address and (parseaddr(address)[1] != address or "@" not in address.strip("@")):
            return "address", f"must be an email address, like aria@example.com, not {address!r}"
        check = credentials.get("sender_check", "")
        if check and check not in SENDER_CHECKS:
            return "sender_check", f"is one of {', '.join(SENDER_CHECKS)}, not {check!r}"
        return None

    def resolve(self, request: HttpRequest) -> ChannelBinding:
        secret = request.headers.get("X-Qorven-Email-Secret", "")
        if not secret:
            raise WebhookRejected(401, "missing X-Qorven-Email-Secret")
        try:
            body = json_body(request)
            # To (and Cc) may list several people: the binding is the one of its addresses
            # this server has.
            addresses = _recipients(str(body.get("to", "")), str(body.get("cc") or ""))
        except (ValueError, AttributeError, TypeError, RecursionError):
            # RecursionError: comments nested deeper than Python's parser goes ("(((…").
            raise WebhookRejected(400, "body is not inbound-parse JSON") from None
        # The binding is the one whose secret this is: an email to two workspaces on this
        # server is posted to each by its own mail service, with its own secret.
        wanted = list(dict.fromkeys(addresses))[:MAX_ADDRESSES]
        bound = _bound(self.kind, wanted)
        binding = _signed_for(bound, wanted, secret)
        if binding is None and cached_only_reading():
            # Screened from the cache alone (channels_app.webhooks.webhook_screen): not
            # refused there. An address it does not keep may be bound with this secret all
            # the same, and a refusal at once for the addresses it keeps only would tell a
            # prober which are bound; the storing thread answers both alike.
            raise NotCached(webhook_bindings.name)
        if binding is not None and cached_only_reading() and not cached_only_stale() and any(
                a not in bound for a in wanted[:next(i for i, a in enumerate(wanted) if bound.get(a) is binding)]):
            # An address named before it, not kept here, may be bound with this secret too:
            # the storing thread, reading them in order, decides which binding it is. Whose
            # it is for the backlog's fair share is told still (cached_only(stale=True)).
            raise NotCached(webhook_bindings.name)
        if binding is None and not bound:
            named = ", ".join(wanted[:5]) + (f" and {len(wanted) - 5} more" if len(wanted) > 5 else "")
            raise self.unbound(named or "no address")
        if binding is None:
            raise WebhookRejected(401, REFUSED, detail=f"bad X-Qorven-Email-Secret for {', '.join(bound)}")
        return binding

    def unbound(self, named: str) -> WebhookRejected:
        return WebhookRejected(401, REFUSED, detail=f"no email binding for {named}")

    def parse(self, request: HttpRequest, binding: ChannelBinding) -> Parsed:
        body = json_body(request)
        try:
            name, sender = parseaddr(str(body.get("from", "")))
        except RecursionError:  # comments nested deeper than Python's parser goes: no sender read
            name, sender = "", ""
        message_id = str(body.get("message_id") or body.get("message-id") or "").strip()
        text = str(body.get("text") or "").strip()
        attachments, left_out = _attachments(body.get("attachments"), message_id)
        if not sender or not message_id or not (text or attachments or left_out):
            return Parsed([])
        references = str(body.get("references") or "").split()
        thread = references[0] if references else str(body.get("in_reply_to") or body.get("in-reply-to") or message_id)
        subject = " ".join(str(body.get("subject") or "").split())  # folded headers: one line
        reply_subject = subject if subject.lower().startswith("re:") else f"Re: {subject}".strip()
        return Parsed([
            InboundMessage(
                channel="email", external_id=message_id, sender_id=sender.lower(), sender_name=name,
                text=f"{subject}\n\n{text}" if subject else text, thread_id=thread,
                # The reply's References: the thread's, then this message (RFC 5322 §3.6.4).
                reply_target=SEP.join([sender, message_id, reply_subject, " ".join([*references, message_id])]),
                sender_proven=sender_proven(body, sender, str(binding.credentials.get("sender_check") or "dkim")),
                images=attachments, left_out=left_out,
            )
        ])

    def send(self, binding: ChannelBinding, target: str, text: str) -> str:
        to, in_reply_to, subject, references = (target.split(SEP) + ["", "", ""])[:4]
        mail = EmailMessage(
            subject=subject or "Re:", body=text, from_email=binding.lookup_key, to=[to],
            headers={"In-Reply-To": in_reply_to, "References": references or in_reply_to} if in_reply_to else {},
        )
        try:
            mail.send(fail_silently=False)
        except NoMailServerError as exc:  # EMAIL_URL unset: fails for good, saying so
            raise SendError(str(exc), permanent=True) from None
        except (BadHeaderError, ValueError) as exc:  # a header that cannot be written: never will be
            raise SendError(f"SMTP: {type(exc).__name__}: {exc}", permanent=True) from None
        except smtplib.SMTPResponseException as exc:  # 5xx is permanent (RFC 5321), 4xx for now
            # A login turned down for good (535) is the account's: no mail goes out with it.
            raise SendError(f"SMTP: {exc.smtp_code} {exc.smtp_error!r}", permanent=exc.smtp_code >= 500,
                            account=isinstance(exc, smtplib.SMTPAuthenticationError) and exc.smtp_code >= 500) from None
        except smtplib.SMTPRecipientsRefused as exc:
            codes = [code for code, _ in exc.recipients.values()]
            # Refused for good, the address is: our notice to it would be too.
            raise SendError(f"SMTP: recipients refused {codes}", permanent=all(c >= 500 for c in codes),
                            chat=all(c >= 500 for c in codes)) from None
        except Exception as exc:
            raise SendError(f"SMTP: {type(exc).__name__}: {exc}", permanent=False) from None
        return ""


def _recipients(to: str, cc: str) -> list[str]:
    """The addresses To and Cc name, lower case, read from their first MAX_ADDRESS_TEXT
    characters. RecursionError for comments nested deeper than the parser goes."""
    text = ", ".join(field for field in (to, cc) if field)
    if len(text) > MAX_ADDRESS_TEXT:
        cut = text.rfind(",", 0, MAX_ADDRESS_TEXT + 1)
        text = text[:cut] if cut > 0 else ""
    return [a.lower() for _, a in getaddresses([text]) if a]


def _bound(kind: str, addresses: list[str]) -> dict[str, ChannelBinding]:
    """The enabled bindings of these addresses, by address, with their tenant and Qor, from
    this process's cache of bindings (as Adapter.enabled_binding reads them), those it does
    not keep in one read (each was a read of its own, asked before the secret was checked, so
    a post naming thousands cost thousands). Within cached_only(): those it keeps."""
    keys: dict[Hashable, str] = {(kind, address): address for address in addresses}

    def load(missing: list[Hashable]) -> dict[Hashable, ChannelBinding]:
        return {(kind, b.lookup_key): b for b in ChannelBinding.objects.select_related("tenant", "qor").filter(
            kind=kind, enabled=True, lookup_key__in=[keys[key] for key in missing])}

    try:
        found = webhook_bindings.get_many(keys, load) if keys else {}
    except NotCached as exc:
        found = exc.kept
    return {keys[key]: binding for key, binding in found.items()}


def _signed_for(bound: dict[str, ChannelBinding], addresses: list[str], secret: str) -> ChannelBinding | None:
    """The first of `addresses` bound with this secret."""
    return next((bound[a] for a in addresses if a in bound
                 and same_secret(str(bound[a].credentials.get("secret", "")), secret)), None)


def _attachments(raw: object, message_id: str) -> tuple[list[InboundImage], int]:
    """The mail's attachments (`[{"filename", "content_type", "content": base64}]`) that are
    kept: images, PDFs and text files, checked by content, at most QORVEN_MAX_UPLOAD
    each and four in all; and how many were left out (logged by kind only), which the
    message carries so the model can tell the person. The text counts either way."""
    kept: list[InboundImage] = []
    left_out = 0
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        if len(kept) >= MAX_FILES:
            left_out += 1
            continue
        name = str(item.get("filename") or "")
        try:
            data = base64.b64decode(str(item.get("content") or ""), validate=True)
            checked = attachment_check(data, name)
        except (ValueError, UploadRefused) as exc:
            logger.info("an attachment of email %s was left out: %s", message_id[:80], type(exc).__name__)
            left_out += 1
            continue
        kept.append(InboundImage(mime_type=checked.mime_type, data=checked.data, size=checked.size,
                                 name=checked.name))
    return kept, left_out


def _dkim_passes(verdict: str, domain: str) -> bool:
    """`pass`, or SendGrid's `{@a.example : pass, @b.example : fail}` with a pass for `domain`."""
    verdict = verdict.strip().lower()
    if verdict == "pass":
        return True
    for entry in verdict.strip("{}").split(","):
        signer, _, result = entry.partition(":")
        if signer.strip().lstrip("@") == domain and result.strip() == "pass":
            return True
    return False


def sender_proven(body: dict, sender: str, check: str) -> bool:
    """Whether the inbound provider's verdict proves the From address (see the module)."""
    domain = sender.rpartition("@")[2].lower()
    if check == "none" or not domain:
        return False
    if _dkim_passes(str(body.get("dkim") or ""), domain):
        return True
    return check == "dkim_or_spf" and str(body.get("spf") or body.get("SPF") or "").strip().lower() == "pass"
