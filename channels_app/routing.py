"""WebSocket routes of the live surfaces (see channels_app.consumers for the protocol)."""
from __future__ import annotations

from django.urls import path

from .consumers.member_chat import ChatConsumer
from .consumers.visitor_chat import WebchatConsumer

websocket_urlpatterns: list = [
    path("ws/chat/<slug:tenant>/<slug:qor>/", ChatConsumer.as_asgi()),
    path("ws/webchat/<str:key>/", WebchatConsumer.as_asgi()),
]
