"""WhatsApp Cloud API: webhook notifications in, Graph API messages out.

GET verification answers `hub.challenge` when `hub.verify_token` matches a binding's.
POST bodies are signed: `X-Hub-Signature-256: sha256=<HMAC-SHA256(app_secret, raw body)>`.
The binding is named by `metadata.phone_number_id`. Credentials: `token`, `app_secret`,
`verify_token`.
"""
from __future__ import annotations

import base64
import logging
from typing import Any, Literal
from urllib.parse import quote

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from ..api_auth import json_error
from ..formatting import WHATSAPP
from ..inbound import InboundImage, InboundMedia, InboundMessage
from ..json_body import json_body
from ..models import ChannelBinding
from ..selectors import bindings_by_verify_token
from .base import (
    AccountProblem,
    Adapter,
    Parsed,
    ProofFailed,
    Undelivered,
    WebhookRejected,
    checked_media,
    download_limited,
    hmac_hex,
    media_url_allowed,
    proof_answer,
    same_secret,
    secret_digest,
    send_unreachable,
)

logger = logging.getLogger(__name__)
_MEDIA_KINDS: dict[str, Literal["photo", "voice", "file"]] = {"image": "photo", "audio": "voice", "document": "file"}
META_HOSTS = (".fbsbx.com", ".facebook.com", ".whatsapp.net", ".fbcdn.net")  # where Graph media URLs point


# The answer to a bad signature, and to a phone number id not bound here alike: the
# notification names its number in the clear, and two answers would tell anyone whether it
# is bound on this server (the log tells them apart). Meta documents no status for it.
FORGED = (401, "bad X-Hub-Signature-256")


def _changes(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        change.get("value") or {}
        for entry in body.get("entry") or []
        for change in entry.get("changes") or []
        if isinstance(change, dict)
    ]


class WhatsAppAdapter(Adapter):
    kind = "whatsapp"
    methods = ("GET", "POST")
    limit = 4096
    style = WHATSAPP
    credentials = {
        "phone_number_id": "the Cloud API phone number id",
        "token": "a system-user access token",
        "app_secret": "the Meta app secret (signs webhooks)",
        "verify_token": "the verify token you enter in the webhook settings",
    }
    required = ("phone_number_id", "token", "app_secret", "verify_token")

    def lookup_key(self, credentials: dict[str, str]) -> str:
        return credentials["phone_number_id"]

    def account_proof(self, credentials: dict[str, str]) -> AccountProblem | None:
        """The Graph API answers the phone number's own node (its id) only to a token
        that may use that number."""
        number_id = self.lookup_key(credentials)
        refused = AccountProblem(f"WhatsApp did not accept this token for phone number id {number_id}.")
        try:
            node = proof_answer("WhatsApp", "GET", f"{settings.WHATSAPP_API_BASE.rstrip('/')}/{quote(number_id, safe='')}",
                                refused=refused.text, headers={"Authorization": f"Bearer {credentials.get('token', '')}"})
        except ProofFailed as exc:
            return exc.problem
        return None if isinstance(node, dict) and str(node.get("id", "")) == number_id else refused

    def verify_key(self, credentials: dict[str, str]) -> str:
        token = str(credentials.get("verify_token", "") or "")
        return secret_digest(token) if token else ""

    def handle_get(self, request: HttpRequest) -> HttpResponse:
        token = request.GET.get("hub.verify_token", "")
        if request.GET.get("hub.mode") != "subscribe" or not token:
            return json_error(400, "bad verification request")
        for binding in bindings_by_verify_token(kind=self.kind, token=token):
            expected = str(binding.credentials.get("verify_token", ""))
            if expected and same_secret(expected, token):
                return HttpResponse(request.GET.get("hub.challenge", ""), content_type="text/plain")
        return json_error(403, "verify token mismatch")

    def resolve(self, request: HttpRequest) -> ChannelBinding:
        signature = request.headers.get("X-Hub-Signature-256", "")
        if not signature.startswith("sha256="):
            raise WebhookRejected(401, "missing X-Hub-Signature-256")
        try:
            body = json_body(request)
            phone_ids = {str((v.get("metadata") or {}).get("phone_number_id", "")) for v in _changes(body)}
        except (ValueError, AttributeError, TypeError):  # TypeError: a number where a list is sent
            raise WebhookRejected(400, "body is not WhatsApp JSON") from None
        phone_ids.discard("")
        if len(phone_ids) != 1:
            raise WebhookRejected(403, "no single phone_number_id in the notification")
        binding = self.enabled_binding(phone_ids.pop())
        expected = "sha256=" + hmac_hex(str(binding.credentials.get("app_secret", "")), request.body)
        if not same_secret(expected, signature):
            raise WebhookRejected(*FORGED)
        return binding

    def unbound(self, named: str) -> WebhookRejected:
        return WebhookRejected(*FORGED, detail=f"no whatsapp binding for phone number id {named}")

    def parse(self, request: HttpRequest, binding: ChannelBinding) -> Parsed:
        body = json_body(request)
        messages: list[InboundMessage] = []
        undelivered: list[Undelivered] = []
        for value in _changes(body):
            undelivered.extend(_failed(value))
            names = {c.get("wa_id"): (c.get("profile") or {}).get("name", "") for c in value.get("contacts") or []}
            for raw in value.get("messages") or []:
                kind = raw.get("type")
                text = (raw.get("text") or {}).get("body", "") if kind == "text" else _tapped(raw)
                media: list[InboundMedia] = []
                left_out = 0
                attached = raw.get(kind) if isinstance(raw.get(kind), dict) else None
                if kind in ("image", "audio", "document") and attached is not None and attached.get("id"):
                    text = str(attached.get("caption", "") or "")
                    media.append(InboundMedia(kind=_MEDIA_KINDS[kind], file_id=str(attached["id"]),
                                              mime_type=str(attached.get("mime_type", "") or ""),
                                              name=str(attached.get("filename", "") or "")))
                elif kind == "video" and attached is not None:
                    # Not kept: the message counts, and the model can say what it could not open.
                    text, left_out = str(attached.get("caption", "") or ""), 1
                if not (text or media or left_out) or not raw.get("id") or not raw.get("from"):
                    continue
                sender = str(raw["from"])
                messages.append(
                    InboundMessage(
                        channel="whatsapp", external_id=str(raw["id"]), sender_id=sender,
                        sender_name=names.get(sender, ""), text=text, reply_target=sender, media=media,
                        left_out=left_out,
                    )
                )
        return Parsed(messages, undelivered=undelivered)

    def fetch_media(self, binding: ChannelBinding, media: InboundMedia) -> InboundImage | None:
        """The Graph media endpoint names a short-lived URL; both calls carry the token, so
        the URL must be Meta's (or the configured API's own host). Up to QORVEN_MAX_UPLOAD."""
        token = {"Authorization": f"Bearer {binding.credentials.get('token', '')}"}
        limit = settings.QORVEN_MAX_UPLOAD
        what = {"photo": "image", "voice": "voice note"}.get(media.kind, "document")
        try:
            with self.http() as client:
                meta = client.get(f"{settings.WHATSAPP_API_BASE.rstrip('/')}/{media.file_id}", headers=token)
                meta.raise_for_status()
                info = meta.json()
                url, size = str(info.get("url", "")), int(info.get("file_size") or 0)
                if not media_url_allowed(url, hosts=META_HOSTS, api_base=settings.WHATSAPP_API_BASE):
                    logger.warning("a WhatsApp %s on binding %s names a URL off Meta's hosts; not fetched", what,
                                   binding.pk)
                    return None
                if size > limit:
                    logger.warning("a WhatsApp %s on binding %s is too big to keep (%s bytes)", what, binding.pk, size)
                    return None
                content = download_limited(client, url, headers=token, limit=limit)
        except Exception as exc:  # the message counts without it
            logger.warning("could not fetch a WhatsApp %s on binding %s: %s", what, binding.pk, type(exc).__name__)
            return None
        if content is None:
            logger.warning("a WhatsApp %s on binding %s is too big to keep", what, binding.pk)
            return None
        if media.kind == "file":  # kept when it is a PDF, a text file or an image, by its content
            return checked_media(binding, media, content, "WhatsApp")
        mime = (str(info.get("mime_type") or media.mime_type) or ("image/jpeg" if media.kind == "photo" else "audio/ogg"))
        mime = mime.split(";")[0].strip()
        return InboundImage(mime_type=mime, data=base64.b64encode(content).decode(), size=len(content))

    def send(self, binding: ChannelBinding, target: str, text: str) -> str:
        url = f"{settings.WHATSAPP_API_BASE.rstrip('/')}/{binding.lookup_key}/messages"
        payload = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": target,
                   "type": "text", "text": {"preview_url": False, "body": text}}
        try:
            with self.http() as client:
                response = client.post(url, json=payload,
                                       headers={"Authorization": f"Bearer {binding.credentials.get('token', '')}"})
        except Exception as exc:
            raise send_unreachable("WhatsApp", exc) from None
        # Meta's code decides (its HTTP status is 400 for most, 403 for some refusals of the
        # account and some of the person); 401: it does not take the access token.
        code = self.error_code(response, "error", "code")
        self.raise_for_status(response, account=response.status_code == 401 or code in ACCOUNT_REFUSED,
                              chat=code in CHAT_REFUSED, later=code in RETRY_LATER)
        return self.accepted_id(response, "messages", 0, "id")


# How Meta's error codes (`error.code` in a send's answer, `errors[].code` in a failed
# status webhook) are taken, from the Cloud API's error code reference. A code in none of
# these fails the one message for good (a 4xx) or is retried (a 429, a 5xx).
#
# The one chat, not the account: our notice to that person could not get there either,
# and nothing more goes to them until they write again or change something on their side.
CHAT_REFUSED = frozenset({
    131047,  # Re-engagement message: their 24-hour window closed; only a template reaches them
    131026,  # Message undeliverable: not a WhatsApp number, terms not accepted, an app too old
    131021,  # Recipient cannot be sender: the chat is our own number
    130497,  # Business account restricted from messaging users in this country (a 403 about them)
})
# The account itself, as a token Meta does not take (401): nothing goes out through it
# until the owner fixes it in Meta's Business Manager or gives the binding a new token.
ACCOUNT_REFUSED = frozenset({
    0,  # AuthException: the access token could not be authenticated
    190,  # Access token has expired (OAuthException)
    3,  # API Method: a capability or permission the app lacks
    10,  # Permission denied: not granted, or taken away (a 403)
    *range(200, 300),  # API Permission: not granted, or taken away (a 403)
    368,  # Temporarily blocked for policies violations
    131005,  # Access denied: the permission was not granted or was removed (a 403)
    131031,  # Business Account locked: restricted or disabled for a policy violation
    131042,  # Business eligibility payment issue: no valid payment method on the account
    133010,  # Phone number not registered on the WhatsApp Business Platform
})
# A limit that passes: tried again with backoff, though Meta answers it with a 400.
# Reported later in a status webhook instead, the part has ended: the person is told,
# and our notice goes out through the same retries.
RETRY_LATER = frozenset({
    2,  # API Service: Meta down or overloaded for a while
    4,  # API Too Many Calls: the app's own rate limit
    80007,  # Rate limit issues: the WhatsApp Business Account's rate limit
    130429,  # Rate limit hit: the phone number's throughput
    131048,  # Spam rate limit hit: too many of its recent messages blocked or flagged
    131056,  # (Business Account, Consumer Account) pair rate limit hit: too many to this one person
})


def _failed(value: dict[str, Any]) -> list[Undelivered]:
    """The replies Meta accepted and now reports failed (a closed 24-hour window, a
    number not on WhatsApp, a locked account, a rate limit...). Sent, delivered and read receipts change
    nothing of ours."""
    found = []
    for status in value.get("statuses") or []:
        if not isinstance(status, dict) or status.get("status") != "failed" or not status.get("id"):
            continue
        errors = [e for e in status.get("errors") or [] if isinstance(e, dict)]
        said = "; ".join(f"{e.get('code', '')} {e.get('title', '')}".strip() for e in errors) or "no reason given"
        codes = {_code(e) for e in errors}
        found.append(Undelivered(str(status["id"]), f"WhatsApp reported it undelivered: {said}",
                                 chat=not codes.isdisjoint(CHAT_REFUSED), account=not codes.isdisjoint(ACCOUNT_REFUSED)))
    return found


def _code(error: dict) -> int | None:
    code = error.get("code")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _tapped(raw: dict) -> str:
    """What a person chose by tapping: a reply button's or a list row's title (an
    interactive message's answer), or a template button's text."""
    if raw.get("type") == "interactive" and isinstance(raw.get("interactive"), dict):
        chosen = raw["interactive"].get("button_reply") or raw["interactive"].get("list_reply") or {}
        return str(chosen.get("title", "") or "") if isinstance(chosen, dict) else ""
    if raw.get("type") == "button" and isinstance(raw.get("button"), dict):
        return str(raw["button"].get("text", "") or "")
    return ""
