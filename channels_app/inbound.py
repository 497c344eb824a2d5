"""The one shape every platform's inbound message is normalised into."""
from __future__ import annotations

from pydantic import BaseModel, Field


class InboundImage(BaseModel):
    mime_type: str
    data: str  # base64
    size: int


class InboundMessage(BaseModel):
    channel: str  # the message's channel tag: telegram, whatsapp, slack_dm, slack, discord_dm, …
    external_id: str  # the platform's id for this message, unique within the binding
    sender_id: str  # the platform's id for the sender
    sender_name: str = ""
    text: str = ""
    group: bool = False  # a group chat: its own session, answered only when addressed
    thread_id: str = ""  # group chat id, email thread, phone number
    addressed: bool = True  # in a group: the bot was mentioned or replied to
    reply_target: str = ""  # where the answer goes (chat id, channel id, interaction token …)
    images: list[InboundImage] = Field(default_factory=list)
    extra: dict = Field(default_factory=dict)
