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
# What is said on these reaches the person on that platform: a reply or a notice of the
# Qor's appended with one of them (and observers told) is sent there by channels_app, which
# plans its parts after the append commits (channels_app.delivery.PLATFORM_OF maps each to
# the platform that sends it). The append marks it until then (Message.delivery_unplanned).
PLATFORM_CHANNELS: frozenset[str] = frozenset(
    {Channel.TELEGRAM, Channel.WHATSAPP, Channel.SLACK_DM, Channel.SLACK, Channel.DISCORD_DM, Channel.DISCORD,
     Channel.EMAIL, Channel.SMS}
)
