from __future__ import annotations

from django.apps import AppConfig


class TenancyConfig(AppConfig):
    """Tenants, memberships, Qors, API tokens, switches and trust: the bottom layer, and the
    tool and slash-command registries every app registers with.

    The app keeps the label `qorven` it had before it left the `qorven` package, so its
    tables (`qorven_tenant`, …), migration history, content types and permissions stay
    exactly as they are in existing databases: nothing is renamed or rebuilt."""

    name = "tenancy"
    label = "qorven"
    verbose_name = "Tenancy"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        # Every app's tools and slash commands, as Django's admin discovers `admin.py`.
        autodiscover_modules("tools")
        autodiscover_modules("slash_commands")

        from django.db.models.signals import post_delete, post_save

        from .models import McpServer, ModelFallback, PluginSetting
        from .selectors import mcp_servers, model_fallbacks
        from .switches import channel_switches

        for signal in (post_save, post_delete):
            signal.connect(channel_switches.clear, sender=PluginSetting, dispatch_uid="tenancy.channel_switches")
            signal.connect(model_fallbacks.clear, sender=ModelFallback, dispatch_uid="tenancy.model_fallbacks")
            signal.connect(mcp_servers.clear, sender=McpServer, dispatch_uid="tenancy.mcp_servers")
