"""Qorven under a path of a shared host: `https://example.org/qorven/` (QORVEN_URL_PREFIX).

Everything the server names — redirects, forms, links, scripts, the pages' API calls and
sockets, the webchat's loader and frame, the admin, the webhook and embed addresses
printed by the commands — starts with the prefix. Django does most of that once it knows
the request's script name (reverse(), {% url %}, {% static %}, the admin); the settings
that follow from the prefix are `prefix_settings`, and `UrlPrefix` gives every request
and socket the script name (ASGI's root_path) under either server, uvicorn or Daphne.

The proxy in front may pass the path on as it is (`/qorven/chat/`) or strip the prefix
(`/chat/`): both are taken, so no proxy setting has to match ours, and probes that ask
the process directly (`/healthz`) need no prefix. That is unambiguous because a prefix may
not start with a path of Qorven's own (`/chat`, `/v1`, …).
"""
from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

from django.core.exceptions import ImproperlyConfigured

# The first segments of Qorven's own paths (qorven/urls.py, channels_app/routing.py).
OWN_PATHS = frozenset({"accounts", "admin", "chat", "favicon.ico", "healthz", "metrics", "readyz", "static", "v1",
                       "webchat", "ws"})
_SEGMENT = re.compile(r"[A-Za-z0-9_~-][A-Za-z0-9._~-]*")


def url_prefix_parse(var: str, value: str) -> str:
    """`/qorven` from `/qorven`, `qorven/` or `/qorven/`; "" for none (empty or `/`).
    ImproperlyConfigured for anything that is not a plain path (a query, `..`, a space,
    a full URL) or that starts with a path of Qorven's own."""
    segments = [s for s in value.strip().strip("/").split("/")] if value.strip().strip("/") else []
    if not all(_SEGMENT.fullmatch(s) for s in segments):
        raise ImproperlyConfigured(
            f"{var} must be a path such as /qorven (letters, digits, '-', '_', '.' and '~' between slashes), "
            f"not {value!r}")
    if segments and segments[0].lower() in OWN_PATHS:
        raise ImproperlyConfigured(
            f"{var} must not start with a path of Qorven's own (/{segments[0]}), as {value!r} does: "
            "choose another, such as /qorven")
    return "/" + "/".join(segments) if segments else ""


def public_url_under(public_url: str, prefix: str, *, var: str = "QORVEN_PUBLIC_URL") -> str:
    """The public address with the prefix: `https://example.org/qorven` from
    `https://example.org` or `https://example.org/qorven/` and `/qorven`. A public
    address whose path is another than the prefix is an error: the links would lead
    elsewhere than the server answers."""
    parts = urlsplit(public_url)
    path = parts.path.rstrip("/")
    if path and path != prefix:
        raise ImproperlyConfigured(
            f"{var} ({public_url!r}) and QORVEN_URL_PREFIX ({prefix or 'none'}) name two different paths: "
            "give the path once, in either")
    return f"{parts.scheme}://{parts.netloc}{prefix}"


def prefix_settings(prefix: str) -> dict[str, Any]:
    """Django's settings that follow from the prefix ("" for none: Django's own defaults).
    The cookies are the prefix's only, so the other sites of a shared host are not sent
    them."""
    return {
        "QORVEN_URL_PREFIX": prefix,
        # The script name of requests Django's own handlers make (the test client's), and
        # the one reverse() uses outside a request (commands, workers).
        "FORCE_SCRIPT_NAME": prefix or None,
        "STATIC_URL": f"{prefix}/static/",
        "SESSION_COOKIE_PATH": f"{prefix}/",
        "CSRF_COOKIE_PATH": f"{prefix}/",
    }


def within_prefix(url: str, prefix: str, *, base: str = "/") -> bool:
    """Whether `url` (a redirect's target, relative to the page at `base`) leads under
    `prefix` as a browser reads it: its `..` segments taken, `%2e` and `\\` as `.` and `/`
    (and `%2f` as `/`, as a proxy in front may decode it)."""
    path = unquote(urlsplit(urljoin(base, url.replace("\\", "/"))).path).replace("\\", "/")
    normal = posixpath.normpath(path) if path else "/"
    return normal == prefix or normal.startswith(prefix + "/")


def redirect_within_prefix(view: Callable[..., Any], fallback: str) -> Callable[..., Any]:
    """`view` (a sign-in or sign-out, which redirect to the `next` they are given) whose
    redirect out of QORVEN_URL_PREFIX goes to `fallback` (a URL name) instead. Django's own
    check takes any path of the same host, and under a prefix the host's other paths are
    other sites — a link to our sign-in could send a person on to one of them."""

    @wraps(view)
    def wrapper(request: Any, *args: Any, **kwargs: Any) -> Any:
        from django.conf import settings
        from django.shortcuts import resolve_url

        response = view(request, *args, **kwargs)
        prefix = settings.QORVEN_URL_PREFIX
        location = response.get("Location") if prefix and 300 <= response.status_code < 400 else None
        if location is not None and not within_prefix(location, prefix, base=request.path):
            response["Location"] = resolve_url(fallback)
        return response

    return wrapper


def app_path(scope: dict[str, Any]) -> str:
    """A request's path below the prefix (what the URL patterns match)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


class UrlPrefix:
    """ASGI: under QORVEN_URL_PREFIX every HTTP request and socket gets the prefix as its
    root_path (and none without it, whatever the server put there), and a path that starts with it (ASGI's path includes the root path; a
    proxy that passes it on as asked) or one without it (a proxy that strips it, a
    probe) — Django and Channels' router then match the rest. `/qorven` alone is
    `/qorven/`."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        from django.conf import settings

        prefix = settings.QORVEN_URL_PREFIX
        if scope["type"] in ("http", "websocket"):
            if prefix:
                scope = scope_under(scope, prefix)
            elif scope.get("root_path"):
                # Daphne takes it from a Daphne-Root-Path header any client may send: with
                # no prefix, no page names a place under it (nor a cache in front hands one on).
                scope = {**scope, "root_path": ""}
        return await self.app(scope, receive, send)


def scope_under(scope: dict[str, Any], prefix: str) -> dict[str, Any]:
    path = scope.get("path", "")
    raw = scope.get("raw_path") or path.encode("latin-1", "replace")
    if path == prefix:
        path, raw = path + "/", raw + b"/"
    elif not path.startswith(prefix + "/"):
        path, raw = prefix + path, prefix.encode("ascii") + raw
    return {**scope, "root_path": prefix, "path": path, "raw_path": raw}
