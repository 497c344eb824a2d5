"""Replies read formatted on every platform: the model's Markdown is stored as it wrote it
(the chat page renders it there) and written in each platform's own formatting only as its
parts are planned (`reply_parts`); text of ours is written so that nothing in it — what
people wrote, quoted in a command's answer — formats anything."""
from __future__ import annotations

from .parts import reply_parts
from .render import Style
from .styles import AS_WRITTEN, DISCORD_MARKDOWN, PLAIN, SLACK_MRKDWN, TELEGRAM_HTML, WHATSAPP

__all__ = ["AS_WRITTEN", "DISCORD_MARKDOWN", "PLAIN", "SLACK_MRKDWN", "Style", "TELEGRAM_HTML", "WHATSAPP", "reply_parts"]
