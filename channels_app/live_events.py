"""Tell live surfaces about every appended message (`message.new`), and about a chat
moving to a new session (`session.started`: its first message, after /clear or a
compaction), so a page watching the chat follows it."""
from __future__ import annotations

from typing import Any

from qorven.runtime.publisher import (
    broadcast_group_soon,
    broadcast_soon,
    chat_group,
    nobody_watches,
    session_group,
)
from sessions_app.models import Message, Session
from sessions_app.selectors import StoredMessage


def message_hidden(message: StoredMessage) -> bool:
    """Tool calls and tool results are the Qor's working, not the conversation: surfaces
    do not show them, nor a replaced answer (they still take a seq, so clients count them
    when catching up)."""
    return (message.role == Message.Role.TOOL or bool(message.tool_calls)
            # a reply the person had written again (regenerate)
            or bool((message.metadata or {}).get("superseded")))


def message_event(message: StoredMessage) -> dict[str, Any]:
    """The one shape of a message on every live surface (WebSocket, terminal, webchat)."""
    metadata = message.metadata or {}
    hidden = message_hidden(message)
    return {
        "type": "message.new",
        "seq": message.seq,
        "role": message.role,
        "content": "" if hidden else message.content,
        "channel": message.channel,
        "sender_name": message.sender_name,
        "created_at": message.created_at.isoformat(),
        "notice": metadata.get("notice", ""),
        "reply_to": metadata.get("reply_to"),
        "hidden": hidden,
        # A user message's answer: pending, answered or failed (a notice says why); None
        # for messages that expect none.
        "answer_state": message.answer_state,
        # Sent by the Qor on its own (a heartbeat's result), not in answer to anyone.
        "proactive": "heartbeat" in metadata,
        "heartbeat_name": metadata.get("heartbeat_name", ""),
        "stopped": bool(metadata.get("stopped")),  # a reply the person stopped part-way
        # Images sent with it ({"type", "mime_type", "size"}, in order): read each from the
        # surface's images endpoint by (session, seq, index).
        "attachments": [] if hidden else list(metadata.get("attachments") or []),
    }


def on_message_appended(sender, message: Message, **kwargs) -> None:
    if not nobody_watches(session_group(message.session_id)):
        broadcast_soon(message.session_id, message_event(message))
    session = message.session
    if message.seq == 1 and session.kind == Session.Kind.CANONICAL and session.user_id is not None:
        broadcast_group_soon(
            chat_group(session.tenant_id, session.qor_id, session.user_id),
            {"type": "session.started", "session_id": session.pk},
        )
