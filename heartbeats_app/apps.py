from __future__ import annotations

from django.apps import AppConfig


class HeartbeatsAppConfig(AppConfig):
    name = "heartbeats_app"
    verbose_name = "Heartbeats"

    def ready(self) -> None:
        from . import commands, tools  # noqa: F401  register /beats and the beat tools
