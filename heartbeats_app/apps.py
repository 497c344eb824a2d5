from __future__ import annotations

from django.apps import AppConfig


class HeartbeatsAppConfig(AppConfig):
    name = "heartbeats_app"
    verbose_name = "Heartbeats"
