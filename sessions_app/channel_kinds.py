"""The channel vocabulary: which surfaces merge into the canonical chat and which do not."""
from __future__ import annotations

from django.db import models


class Channel(models.TextChoices):
    WEB = "web"
    TUI = "tui"
    TELEGRAM = "telegram"
    WHATSAPP = "whatsapp"
    SLACK_DM = "slack_dm"
    DISCORD_DM = "discord_dm"
    WEBCHAT = "webchat"
    SLACK = "slack"  # a Slack channel (group)
    DISCORD = "discord"  # a Discord server channel (group)
    EMAIL = "email"
    SMS = "sms"
    VOICE = "voice"
    CRON = "cron"
    SYSTEM = "system"


# Every message from one of these lands in the (tenant, qor, user) canonical session.
CHAT_FAMILY: frozenset[str] = frozenset(
    {Channel.WEB, Channel.TUI, Channel.TELEGRAM, Channel.WHATSAPP, Channel.SLACK_DM, Channel.DISCORD_DM, Channel.WEBCHAT}
)
# These get their own session per external thread (an email thread, a phone number, …).
OWN_SESSION_CHANNELS: frozenset[str] = frozenset({Channel.EMAIL, Channel.SMS, Channel.VOICE, Channel.CRON})
