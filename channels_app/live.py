"""Tell live surfaces about every appended message (`message.new`)."""
from __future__ import annotations

from qorven.live import broadcast_soon
from sessions_app.models import Message


def message_event(message: Message) -> dict:
    return {
        "type": "message.new",
        "seq": message.seq,
        "role": message.role,
        "content": message.content,
        "channel": message.channel,
        "sender_name": message.sender_name,
        "created_at": message.created_at.isoformat(),
        "notice": (message.metadata or {}).get("notice", ""),
    }


def on_message_appended(sender, message: Message, **kwargs) -> None:
    broadcast_soon(message.session_id, message_event(message))
