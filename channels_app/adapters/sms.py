"""SMS through Twilio: a form-encoded webhook signed with `X-Twilio-Signature`
(base64 HMAC-SHA1 of the full URL followed by the sorted POST parameters, keyed with the
auth token), replies through the Messages API. Each phone number is its own session.
Credentials: `number` (ours, E.164), `account_sid`, `auth_token`.
"""
from __future__ import annotations

import base64
import hashlib
import hmac

from django.conf import settings
from django.http import HttpRequest

from ..inbound import InboundMessage
from ..models import ChannelBinding
from .base import Adapter, Parsed, WebhookRejected, enabled_binding, same_secret, send_unreachable


def twilio_signature(auth_token: str, url: str, params: dict[str, str]) -> str:
    payload = url + "".join(f"{k}{params[k]}" for k in sorted(params))
    return base64.b64encode(hmac.new(auth_token.encode(), payload.encode(), hashlib.sha1).digest()).decode()


class SmsAdapter(Adapter):
    kind = "sms"
    limit = 1600
    credentials = {
        "number": "the Twilio phone number, E.164 (+15550000000)",
        "account_sid": "the Twilio account SID",
        "auth_token": "the Twilio auth token (signs webhooks)",
    }
    required = ("number", "account_sid", "auth_token")

    def lookup_key(self, credentials: dict[str, str]) -> str:
        return credentials["number"].strip()

    def resolve(self, request: HttpRequest) -> ChannelBinding:
        signature = request.headers.get("X-Twilio-Signature", "")
        if not signature:
            raise WebhookRejected(401, "missing X-Twilio-Signature")
        binding = enabled_binding(self.kind, request.POST.get("To", "").strip())
        url = settings.QORVEN_PUBLIC_URL.rstrip("/") + request.get_full_path()
        params = {k: request.POST.get(k, "") for k in request.POST}
        expected = twilio_signature(str(binding.credentials.get("auth_token", "")), url, params)
        if not same_secret(expected, signature):
            raise WebhookRejected(401, "bad X-Twilio-Signature")
        return binding

    def parse(self, request: HttpRequest, binding: ChannelBinding) -> Parsed:
        sender, text, sid = request.POST.get("From", ""), request.POST.get("Body", ""), request.POST.get("MessageSid", "")
        try:
            pictures = max(int(request.POST.get("NumMedia", "0") or 0), 0)  # MMS: not kept (yet), counted
        except ValueError:
            pictures = 0
        if not sender or not (text or pictures) or not sid:
            return Parsed([])
        return Parsed([InboundMessage(channel="sms", external_id=sid, sender_id=sender, text=text,
                                      thread_id=sender, reply_target=sender, left_out=pictures)])

    def send(self, binding: ChannelBinding, target: str, text: str) -> str:
        sid = str(binding.credentials.get("account_sid", ""))
        url = f"{settings.TWILIO_API_BASE.rstrip('/')}/2010-04-01/Accounts/{sid}/Messages.json"
        try:
            with self.http() as client:
                response = client.post(url, data={"To": target, "From": binding.lookup_key, "Body": text},
                                       auth=(sid, str(binding.credentials.get("auth_token", ""))))
        except Exception as exc:
            raise send_unreachable("Twilio", exc) from None
        self.raise_for_status(response)
        return self.accepted_id(response, "sid")
