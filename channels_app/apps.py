from __future__ import annotations

from django.apps import AppConfig


class ChannelsAppConfig(AppConfig):
    name = "channels_app"
    verbose_name = "Channels"

    def ready(self) -> None:
        from qorven.agent.tools import registry
        from sessions_app.signals import message_appended

        from . import commands  # noqa: F401  registers /pair
        from .delivery import on_message_appended as deliver_on_append
        from .live import on_message_appended
        from .plugins import tools_enabled

        registry.enabled_check = tools_enabled
        message_appended.connect(on_message_appended, dispatch_uid="channels_app.live")
        message_appended.connect(deliver_on_append, dispatch_uid="channels_app.delivery")
