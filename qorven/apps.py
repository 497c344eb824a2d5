from __future__ import annotations

from django.apps import AppConfig


class QorvenConfig(AppConfig):
    name = "qorven"
    verbose_name = "Qorven tenancy"

    def ready(self) -> None:
        import qorven.agent.builtin_tools  # noqa: F401  registers the tools
