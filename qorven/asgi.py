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

from channels_app.routing import websocket_urlpatterns  # noqa: E402

from django.core.exceptions import SuspiciousFileOperation  # noqa: E402
from django.http import Http404  # noqa: E402


class StaticFiles(ASGIStaticFilesHandler):
    """Django's static files handler, answering 404 to a path that tries to leave the
    static folders (`/static/%2e%2e/…`) instead of letting the error escape as a 500."""

    def serve(self, request):
        try:
            return super().serve(request)
        except SuspiciousFileOperation:
            raise Http404("no such file") from None


http_app = StaticFiles(django_asgi_app) if settings.QORVEN_SERVE_STATIC else django_asgi_app

application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
