from __future__ import annotations

from django.apps import AppConfig


class ChannelsAppConfig(AppConfig):
    name = "channels_app"
    verbose_name = "Channels"
