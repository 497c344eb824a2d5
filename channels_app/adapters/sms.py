"""SMS through Twilio: a form-encoded webhook signed with `X-Twilio-Signature`
(base64 HMAC-SHA1 of the full URL followed by the sorted POST parameters, keyed with the
auth token), replies through the Messages API. Each phone number is its own session; an
MMS's pictures are fetched from Twilio's media URLs by the processing task.
Credentials: `number` (ours, E.164, or a short code), `account_sid`, `auth_token`.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
from urllib.parse import quote

from django.conf import settings
from django.http import HttpRequest

from ..formatting import PLAIN
from ..inbound import InboundImage, InboundMedia, InboundMessage
from ..models import ChannelBinding
from .base import (
    AccountProblem,
    Adapter,
    Parsed,
    ProofFailed,
    WebhookRejected,
    checked_media,
    download_limited,
    media_url_allowed,
    proof_answer,
    same_secret,
    send_unreachable,
)

logger = logging.getLogger(__name__)
E164 = re.compile(r"\+[1-9][0-9]{6,14}")  # a country code, then at most 15 digits in all
SHORT_CODE = re.compile(r"[1-9][0-9]{4,5}")  # five or six digits, as Twilio names one (894546)
# What an Alphanumeric Sender ID may be (up to 11 letters, digits and spaces, a letter among them).
ALPHANUMERIC = re.compile(r"(?=.*[A-Za-z])[A-Za-z0-9 +&_-]{1,11}")
# The answer to a bad signature (Twilio's request validation answers 403), and to a number
# not bound here alike: the webhook names our number (To) in the clear, and two answers
# would tell anyone whether it is bound on this server (the log tells them apart).
FORGED = (403, "bad X-Twilio-Signature")
MMS_KEPT = 4  # attachments of one MMS fetched at most (Twilio allows 10); the rest are counted as left out


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def twilio_signature(auth_token: str, url: str, params: dict[str, str]) -> str:
    payload = url + "".join(f"{k}{params[k]}" for k in sorted(params))
    return base64.b64encode(hmac.new(auth_token.encode(), payload.encode(), hashlib.sha1).digest()).decode()


class SmsAdapter(Adapter):
    kind = "sms"
    limit = 1600
    style = PLAIN  # a text message shows no formatting: the model's Markdown as plain text
    credentials = {
        "number": "the Twilio phone number, E.164 (+15550000000), or its short code (894546)",
        "account_sid": "the Twilio account SID",
        "auth_token": "the Twilio auth token (signs webhooks)",
    }
    required = ("number", "account_sid", "auth_token")

    def lookup_key(self, credentials: dict[str, str]) -> str:
        return credentials["number"].strip()

    def credentials_problem(self, credentials: dict[str, str]) -> tuple[str, str] | None:
        # Texts are matched to the binding by the To Twilio sends: a phone number in E.164,
        # a short code as its digits alone. A number written any other way (no +, spaces)
        # would be bound and never receive a text.
        number = credentials.get("number", "").strip()
        if not number or E164.fullmatch(number) or SHORT_CODE.fullmatch(number):
            return None
        if ALPHANUMERIC.fullmatch(number):
            # Twilio's Alphanumeric Sender IDs are for one-way messaging: nobody can text one.
            return "number", (f"{number!r} is an Alphanumeric Sender ID, which only sends (one-way): no text comes "
                              "to it, so nothing would be answered; give the phone number or short code people text")
        return "number", (f"must be the Twilio number in E.164, like +15550000000 (no spaces), or a short code of "
                          f"5 or 6 digits, like 894546; not {number!r}")

    def account_proof(self, credentials: dict[str, str]) -> AccountProblem | None:
        """The Twilio account the SID and auth token open must own the number texts are
        looked up by (IncomingPhoneNumbers, filtered to it; a short code is among its
        ShortCodes instead)."""
        number, sid = self.lookup_key(credentials), credentials.get("account_sid", "").strip()
        short = bool(SHORT_CODE.fullmatch(number))
        listed, field, param, what = (("SMS/ShortCodes", "short_codes", "ShortCode", "short code") if short else
                                      ("IncomingPhoneNumbers", "incoming_phone_numbers", "PhoneNumber", "incoming number"))
        url = f"{settings.TWILIO_API_BASE.rstrip('/')}/2010-04-01/Accounts/{quote(sid, safe='')}/{listed}.json"
        try:
            found = proof_answer("Twilio", "GET", url, params={param: number},
                                 refused="Twilio did not accept this account SID and auth token.",
                                 auth=(sid, credentials.get("auth_token", "")))
        except ProofFailed as exc:
            return exc.problem
        numbers = found.get(field) if isinstance(found, dict) else None
        key = "short_code" if short else "phone_number"
        if not any(isinstance(n, dict) and n.get(key) == number for n in numbers or []):
            return AccountProblem(f"The Twilio account {sid} has no {what} {number}.")
        return None

    def resolve(self, request: HttpRequest) -> ChannelBinding:
        signature = request.headers.get("X-Twilio-Signature", "")
        if not signature:
            raise WebhookRejected(401, "missing X-Twilio-Signature")
        binding = self.enabled_binding(request.POST.get("To", "").strip())
        # QORVEN_PUBLIC_URL has QORVEN_URL_PREFIX already; the rest is the path below it.
        url = settings.QORVEN_PUBLIC_URL.rstrip("/") + request.get_full_path_info()
        params = {k: request.POST.get(k, "") for k in request.POST}
        expected = twilio_signature(str(binding.credentials.get("auth_token", "")), url, params)
        if not same_secret(expected, signature):
            raise WebhookRejected(*FORGED)
        return binding

    def unbound(self, named: str) -> WebhookRejected:
        return WebhookRejected(*FORGED, detail=f"no sms binding for {named or 'no To'}")

    def parse(self, request: HttpRequest, binding: ChannelBinding) -> Parsed:
        sender, text, sid = request.POST.get("From", ""), request.POST.get("Body", ""), request.POST.get("MessageSid", "")
        try:
            attached = max(int(request.POST.get("NumMedia", "0") or 0), 0)  # MMS
        except ValueError:
            attached = 0
        if not sender or not (text or attached) or not sid:
            return Parsed([])
        media = [
            InboundMedia(kind="file", file_id=f"{sid}:{n}", url=request.POST[f"MediaUrl{n}"],
                         mime_type=request.POST.get(f"MediaContentType{n}", ""), name="")
            for n in range(min(attached, MMS_KEPT)) if request.POST.get(f"MediaUrl{n}")
        ]
        return Parsed([InboundMessage(channel="sms", external_id=sid, sender_id=sender, text=text,
                                      thread_id=sender, reply_target=sender, media=media,
                                      left_out=attached - len(media))])

    def fetch_media(self, binding: ChannelBinding, media: InboundMedia) -> InboundImage | None:
        """An MMS attachment from Twilio's media URL, with the account's key (Twilio may
        require it); only Twilio's own hosts (or the configured API's) are asked."""
        if not media_url_allowed(media.url, hosts=(".twilio.com",), api_base=settings.TWILIO_API_BASE):
            logger.warning("an MMS attachment on binding %s names no URL of Twilio's; not fetched", binding.pk)
            return None
        auth = (str(binding.credentials.get("account_sid", "")), str(binding.credentials.get("auth_token", "")))
        try:
            with self.http() as client:
                content = download_limited(client, media.url, headers={"Authorization": _basic(*auth)},
                                           limit=settings.QORVEN_MAX_UPLOAD)
        except Exception as exc:  # the text still counts
            logger.warning("could not fetch an MMS attachment on binding %s: %s", binding.pk, type(exc).__name__)
            return None
        if content is None:
            logger.warning("an MMS attachment on binding %s is too big to keep", binding.pk)
            return None
        return checked_media(binding, media, content, "MMS")

    def send(self, binding: ChannelBinding, target: str, text: str) -> str:
        sid = str(binding.credentials.get("account_sid", ""))
        url = f"{settings.TWILIO_API_BASE.rstrip('/')}/2010-04-01/Accounts/{sid}/Messages.json"
        try:
            with self.http() as client:
                response = client.post(url, data={"To": target, "From": binding.lookup_key, "Body": text},
                                       auth=(sid, str(binding.credentials.get("auth_token", ""))))
        except Exception as exc:
            raise send_unreachable("Twilio", exc) from None
        # 401: Twilio does not take the account SID and auth token (Authenticate, 20003).
        # 21610: the number replied STOP; nothing reaches it until it sends START.
        self.raise_for_status(response, account=(401,), chat=self.error_code(response, "code") == UNSUBSCRIBED)
        return self.accepted_id(response, "sid")


# Twilio's code for a number that unsubscribed (replied STOP) from ours.
UNSUBSCRIBED = 21610
