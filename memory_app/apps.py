from __future__ import annotations

from django.apps import AppConfig


class MemoryAppConfig(AppConfig):
    name = "memory_app"
    verbose_name = "Memory"

    def ready(self) -> None:
        from qorven.runtime.startup import Startup, on_startup

        from . import checks  # noqa: F401  registers memory's system checks
        from .skills import skills_sync_on_startup

        @on_startup("serve", "worker")
        def skills_sync(startup: Startup) -> None:
            skills_sync_on_startup(startup.stdout, startup.stderr)
