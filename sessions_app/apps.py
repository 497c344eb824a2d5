from __future__ import annotations

from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Conversations"

    def ready(self) -> None:
        from . import checks  # noqa: F401  registers the store's system checks
