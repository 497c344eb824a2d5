"""ASGI entry point for Daphne: HTTP through Django, WebSockets through Channels."""
from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qorven.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from channels_app.consumers.live_chat import RAW_SEND  # noqa: E402
from channels_app.routing import websocket_urlpatterns  # noqa: E402
from channels_app.webhook_ingest import WebhookIngest  # noqa: E402
from qorven.runtime.client_address import ForwardedClient  # noqa: E402
from qorven.runtime.security_headers import plain_headers  # noqa: E402
from qorven.runtime.steady_threads import SteadyThreads  # noqa: E402
from qorven.runtime.url_prefix import UrlPrefix  # noqa: E402

from django.core.exceptions import SuspiciousFileOperation  # noqa: E402
from django.http import Http404  # noqa: E402


class StaticFiles(ASGIStaticFilesHandler):
    """Django's static files handler, answering 404 to a path that tries to leave the
    static folders (`/static/%2e%2e/…`) instead of letting the error escape as a 500.

    It answers before Django's middleware, so it sets what that would (nosniff,
    Referrer-Policy, the policy of an answer that is no page), on its 404s too. The
    files' names do not change between versions, so a browser is told to check them
    again on every page load (a 304 while unchanged): by its own guess from
    Last-Modified it kept a script for days, and ran the previous version's chat page against
    an upgraded server."""

    def serve(self, request):
        try:
            response = super().serve(request)
        except SuspiciousFileOperation:
            raise Http404("no such file") from None
        response.headers.setdefault("Cache-Control", "no-cache")
        return response

    async def get_response_async(self, request):
        response = await super().get_response_async(request)
        plain_headers(response.headers)
        return response


class SameOriginSockets:
    """A WebSocket opens only from a page of this server: the Origin header must match
    scheme, host and port of the address the socket was opened at (https as well behind a
    proxy that terminates TLS), of QORVEN_PUBLIC_URL, or of DJANGO_CSRF_TRUSTED_ORIGINS.
    A page on another port of the same host is another origin."""

    DEFAULT_PORTS = {"http": 80, "https": 443}

    def __init__(self, app) -> None:
        self.app = app

    @classmethod
    def _normal(cls, url: str) -> tuple[str, str, int] | None:
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(url.strip().lower())
            port = parts.port
        except ValueError:
            return None
        if parts.scheme not in cls.DEFAULT_PORTS or not parts.hostname:
            return None
        return parts.scheme, parts.hostname, port or cls.DEFAULT_PORTS[parts.scheme]

    def _allowed(self, scope) -> set[tuple[str, str, int]]:
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        schemes = ["https"] if scope.get("scheme") in ("wss", "https") or self._proxy_says_https(headers) else ["http"]
        if settings.SECURE_PROXY_SSL_HEADER or settings.HTTPS:
            schemes.append("https")
        urls = [f"{scheme}://{host}" for scheme in schemes if host]
        urls += [settings.QORVEN_PUBLIC_URL, *settings.CSRF_TRUSTED_ORIGINS]
        return {n for n in map(self._normal, urls) if n is not None}

    @staticmethod
    def _proxy_says_https(headers: dict[bytes, bytes]) -> bool:
        """The TLS proxy's header (DJANGO_SECURE_PROXY_SSL_HEADER) says the socket is https:
        then so is the page that opens it, as Django's CSRF check holds a form to; a page
        on http:// of the same host (a network that rewrote it) is another origin."""
        if not settings.SECURE_PROXY_SSL_HEADER:
            return False
        meta, value = settings.SECURE_PROXY_SSL_HEADER
        key = meta.removeprefix("HTTP_").replace("_", "-").lower().encode("latin-1")
        return headers.get(key, b"").decode("latin-1").split(",")[0].strip() == value

    async def __call__(self, scope, receive, send):
        from channels.security.websocket import WebsocketDenier

        origin = dict(scope.get("headers") or []).get(b"origin", b"").decode("latin-1")
        normal = self._normal(origin) if origin else None
        if normal is None or normal not in self._allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        # The server's own send, for the frames of live events (see LiveChatConsumer.frame).
        return await self.app({**scope, RAW_SEND: send}, receive, send)


class ProgramSockets:
    """A client that opens a socket with an `Authorization: Bearer` header and no Origin is
    a program (a script, `qorven chat`), not a browser: a browser always sends Origin with
    a WebSocket and cannot set that header. The origin rule guards a browser's cookie
    session against other sites' pages; a program's token is its proof, checked by the
    consumer. Everything else goes to `browsers` (the origin rule)."""

    def __init__(self, app, browsers) -> None:
        self.app, self.browsers = app, browsers

    async def __call__(self, scope, receive, send):
        headers = dict(scope.get("headers") or [])
        if b"origin" not in headers and headers.get(b"authorization", b"")[:7].lower() == b"bearer ":
            return await self.app({**scope, RAW_SEND: send}, receive, send)
        return await self.browsers(scope, receive, send)


http_app = StaticFiles(django_asgi_app) if settings.QORVEN_SERVE_STATIC else django_asgi_app
# The JSON API through Django on a few long-lived threads that keep their connections.
http_app = steady_threads = SteadyThreads(http_app, django_asgi_app, ("/v1/qors/",))
# Platform webhooks skip Django's request cycle and are stored in batches (see the module).
http_app = WebhookIngest(http_app)

sockets = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
# Outermost: everything after it, the server's access log included, sees the client's address;
# then every request and socket gets QORVEN_URL_PREFIX as its root path (none by default).
application = ForwardedClient(UrlPrefix(ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": ProgramSockets(sockets, AllowedHostsOriginValidator(SameOriginSockets(sockets))),
    }
)))
