"""The webchat embed: a script tag on a tenant's own site (channels_app.webchat).

It has no webhook and nothing is sent to a platform: visitors write through the embed's
own endpoints and replies reach them live. The binding is named by its public key (the
one in the script URL); its credentials hold the secret the site signs visitor tokens
with and, optionally, the sites allowed to embed it.
"""
from __future__ import annotations

import re
import secrets
from typing import Any

from django.conf import settings
from django.http import HttpRequest

from ..models import ChannelBinding
from .base import Adapter, Parsed, SendError, WebhookRejected, public_url_unset_note

# A site as a browser names it in Origin: scheme, host and an optional port, nothing more.
ORIGIN = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?")


def embed_snippet(binding: ChannelBinding) -> str:
    """The script tag for anonymous visitors, at this server's public address."""
    base = settings.QORVEN_PUBLIC_URL.rstrip("/")
    return f'<script src="{base}/webchat/{binding.lookup_key}.js" async></script>'


class WebchatAdapter(Adapter):
    kind = "webchat"
    credentials = {
        "key": "the public key in the embed's script URL (generated when omitted)",
        "secret": "the secret your site signs visitor tokens with (generated and shown once when omitted)",
        "origins": "space-separated origins allowed to embed it, e.g. https://example.com (empty: any site)",
    }
    required = ()

    def prepare_credentials(self, credentials: dict[str, str]) -> dict[str, str]:
        return {
            **credentials,
            "key": credentials.get("key") or "wc_" + secrets.token_urlsafe(18),
            "secret": credentials.get("secret") or secrets.token_urlsafe(32),
        }

    def credentials_problem(self, credentials: dict[str, str]) -> tuple[str, str] | None:
        for origin in str(credentials.get("origins", "")).replace(",", " ").split():
            if not ORIGIN.fullmatch(origin):
                return "origins", (f"takes sites as a browser names them, scheme and host (and port), like "
                                   f"https://example.com, not {origin!r}")
        return None

    def binding_to_update(self, *, qor: Any, given: dict[str, str]) -> ChannelBinding | None:
        if given.get("key"):
            return None  # the key names the binding
        return ChannelBinding.objects.filter(tenant_id=qor.tenant_id, qor=qor, kind=self.kind).order_by("pk").first()

    def setup_hint(self, binding: ChannelBinding, given: dict[str, str]) -> list[str]:
        public = settings.QORVEN_PUBLIC_URL_GIVEN  # else the loopback default: no visitor reaches it
        lines = [f"embed ({'paste as is' if public else 'a local example, not an address your visitors reach'}): "
                 f"{embed_snippet(binding)}",
                 'signed-in visitors: add data-token="TOKEN" to the tag, TOKEN signed by your server with the '
                 "binding's secret, and data-token-url=\"URL\" where your site signs fresh ones (README: The "
                 "webchat embed)"]
        if not public:
            lines.append(public_url_unset_note("your visitors reach"))
        if "secret" in getattr(binding, "generated", ()):
            lines.append(f"signing secret (shown once, keep it on your site's server): {binding.credentials['secret']}")
        return lines

    def lookup_key(self, credentials: dict[str, str]) -> str:
        return credentials["key"]

    def resolve(self, request: HttpRequest) -> ChannelBinding:
        raise WebhookRejected(404, "webchat has no webhook; embed /webchat/<key>.js")

    def cache_entries(self, bindings: list[ChannelBinding]) -> dict[Any, Any]:
        return {}  # no webhook

    def parse(self, request: HttpRequest, binding: ChannelBinding) -> Parsed:
        return Parsed([])

    def send(self, binding: ChannelBinding, target: str, text: str) -> str:
        raise SendError("webchat replies are delivered live, not sent", permanent=True)
