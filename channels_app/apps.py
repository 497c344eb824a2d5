from __future__ import annotations

from django.apps import AppConfig


class ChannelsAppConfig(AppConfig):
    name = "channels_app"
    verbose_name = "Channels"

    def ready(self) -> None:
        from sessions_app.signals import message_appended

        from .delivery import on_message_appended as deliver_on_append
        from .live_events import on_message_appended

        message_appended.connect(on_message_appended, dispatch_uid="channels_app.live_events")
        message_appended.connect(deliver_on_append, dispatch_uid="channels_app.delivery")

        from django.db.models.signals import post_delete, post_save

        from tenancy.models import Qor, Tenant

        from .adapters.base import webhook_bindings
        from .models import ChannelBinding

        # A cached binding carries its tenant and Qor: a save of any of them clears it.
        for model in (ChannelBinding, Tenant, Qor):
            for signal in (post_save, post_delete):
                signal.connect(webhook_bindings.clear, sender=model, dispatch_uid=f"channels_app.bindings.{model.__name__}")
