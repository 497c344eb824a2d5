"""The headers every answer carries against script injection, clickjacking and leaks.

A page we render gets a strict Content-Security-Policy: scripts, styles and fonts only
from our own files (no inline script, no `eval`), its WebSocket on the host it was asked
at, attachments shown from `blob:` URLs, and no framing. The webchat frame is framed by
its binding's sites (`frame_ancestors_set`); the admin keeps the inline style attributes
of its lists (its scripts are files). Any other answer (JSON, the webchat's loader
script, a download) is never a page: it may load nothing and be framed nowhere.
Permissions-Policy turns off what no page of ours uses; Referrer-Policy and nosniff go on
every answer, the static files' and the webhooks' too, which never pass Django's
middleware (`basic_headers`, `plain_headers`).

Our own middleware rather than django-csp: the policy depends on the answer (the
binding's sites, the admin, the host the page was asked at) and must also reach the
answers made outside Django's request cycle; that is these few lines either way.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponseBase

NOT_A_PAGE = "default-src 'none'; frame-ancestors 'none'"
REFERRER_POLICY = "same-origin"
# Features no page of ours uses (the chat page attaches voice notes as files, it does not
# record them); what is not named keeps the browser's default for our own origin
# (clipboard-write: the copy buttons, in the webchat frame too; fullscreen; autoplay).
PERMISSIONS_POLICY = ", ".join(f"{feature}=()" for feature in (
    "accelerometer", "camera", "display-capture", "geolocation", "gyroscope", "hid", "magnetometer",
    "microphone", "midi", "payment", "publickey-credentials-get", "screen-wake-lock", "serial", "usb",
    "xr-spatial-tracking",
))
# A site as a browser names it in an Origin: scheme, host, port. Nothing else may reach a
# frame-ancestors list (a stored `;` would start directives of its own).
_ORIGIN = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?")
_ATTRIBUTE = "qorven_frame_ancestors"


def frame_ancestors_set(response: HttpResponseBase, origins: Iterable[str]) -> None:
    """Let the page in `response` be framed by `origins` (sites, `https://shop.example`)
    instead of by none; no origin at all: by any site. An origin that is not one is left
    out, and a list of nothing but those frames nowhere."""
    given = list(origins)
    kept = [origin for origin in given if _ORIGIN.fullmatch(origin)]
    setattr(response, _ATTRIBUTE, kept or (["'none'"] if given else ["*"]))


def page_policy(request: HttpRequest, *, frame_ancestors: Iterable[str] = ("'none'",),
                inline_styles: bool = False) -> str:
    sockets = []
    try:
        host = request.get_host()  # checked against DJANGO_ALLOWED_HOSTS: a host and a port, nothing else
    except DisallowedHost:
        host = ""
    if host:
        # 'self' covers them in today's browsers (CSP 3); older ones need them named.
        sockets = [f"ws://{host}", f"wss://{host}"]
    directives = {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"] if inline_styles else ["'self'"],
        "img-src": ["'self'", "data:", "blob:"],
        "media-src": ["'self'", "blob:"],
        "connect-src": ["'self'", *sockets],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": list(frame_ancestors),
    }
    return "; ".join(" ".join([name, *sources]) for name, sources in directives.items())


def plain_headers(headers: MutableMapping[str, str]) -> None:
    """What an answer that is not a page carries, wherever it is made."""
    headers.setdefault("Content-Security-Policy", NOT_A_PAGE)
    basic_headers(headers)


def basic_headers(headers: MutableMapping[str, str]) -> None:
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("Referrer-Policy", REFERRER_POLICY)


class SecurityHeadersMiddleware:
    """Sets the headers above on every answer of Django's; a view's own (an attachment's
    sandbox, the webchat frame's Referrer-Policy) are kept."""

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self._admin_prefix: str | None = None

    def __call__(self, request: HttpRequest) -> Any:
        response = self.get_response(request)
        headers = response.headers
        headers.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
        is_page = headers.get("Content-Type", "").startswith("text/html")
        if is_page and settings.DEBUG and response.status_code >= 400:
            pass  # Django's debug pages, styled and scripted inline, for the developer only
        elif is_page:
            headers.setdefault("Content-Security-Policy", page_policy(
                request, frame_ancestors=getattr(response, _ATTRIBUTE, ("'none'",)),
                inline_styles=request.path_info.startswith(self.admin_prefix)))
        else:
            headers.setdefault("Content-Security-Policy", NOT_A_PAGE)
        basic_headers(headers)
        return response

    @property
    def admin_prefix(self) -> str:
        # The admin's list pages style a cell or two inline (a beat's status colour, a
        # managed beat's note, a transcript's line breaks); its scripts are files.
        # Below QORVEN_URL_PREFIX, as request.path_info is.
        if self._admin_prefix is None:
            from django.urls import get_script_prefix, reverse

            self._admin_prefix = "/" + reverse("admin:index").removeprefix(get_script_prefix())
        return self._admin_prefix
