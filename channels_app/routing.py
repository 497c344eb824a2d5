"""WebSocket routes. The live chat consumers register here."""
from __future__ import annotations

websocket_urlpatterns: list = []
