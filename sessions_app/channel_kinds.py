"""The channel vocabulary: which surfaces merge into the canonical chat and which do not."""
from __future__ import annotations

from django.db import models


class Channel(models.TextChoices):
    # Labels as the chat page's badges and the admin write them.
    WEB = "web", "Web"
    TUI = "tui", "Terminal"
    TELEGRAM = "telegram", "Telegram"
    WHATSAPP = "whatsapp", "WhatsApp"
    SLACK_DM = "slack_dm", "Slack"
    DISCORD_DM = "discord_dm", "Discord"
    WEBCHAT = "webchat", "Webchat"
    SLACK = "slack", "Slack channel"  # a Slack channel (group)
    DISCORD = "discord", "Discord server"  # a Discord server channel (group)
    EMAIL = "email", "Email"
    SMS = "sms", "SMS"
    VOICE = "voice", "Voice"
    CRON = "cron", "Heartbeat"
    SYSTEM = "system", "System"


# Every message from one of these lands in the (tenant, qor, user) canonical session.
CHAT_FAMILY: frozenset[str] = frozenset(
    {Channel.WEB, Channel.TUI, Channel.TELEGRAM, Channel.WHATSAPP, Channel.SLACK_DM, Channel.DISCORD_DM, Channel.WEBCHAT}
)
# These get their own session per external thread (an email thread, a phone number, …).
OWN_SESSION_CHANNELS: frozenset[str] = frozenset({Channel.EMAIL, Channel.SMS, Channel.VOICE, Channel.CRON})
