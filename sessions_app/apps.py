from __future__ import annotations

from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Conversations"

    def ready(self) -> None:
        import sessions_app.tools  # noqa: F401  registers the tools
        import sessions_app.commands  # noqa: F401  registers the slash commands
