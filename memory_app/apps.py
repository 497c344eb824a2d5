from __future__ import annotations

from django.apps import AppConfig


class MemoryAppConfig(AppConfig):
    name = "memory_app"
    verbose_name = "Memory"

    def ready(self) -> None:
        import memory_app.tools  # noqa: F401  registers the tools
        import memory_app.commands  # noqa: F401  registers the slash commands
