"""The one shape every platform's inbound message is normalised into."""
from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from qorven.runtime.storable_text import storable_json


class _Storable(BaseModel):
    """Every string a platform sent, NUL dropped as it is read (qorven.runtime.storable_text):
    the event is stored as it was parsed, before anything else could clean it."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        return storable_json(value) if isinstance(value, str | dict | list) else value


ID_MAX = 255  # the columns platform ids are kept in (events, messages, identities, threads)
NAME_MAX = 200  # Message.sender_name, Identity.display_name


def fitting_id(value: str) -> str:
    """A platform id as a column of ID_MAX holds it: as sent when it fits, else its start
    and a digest of the whole, so a longer one (an email's Message-ID may run to hundreds
    of characters) is still stored, the same every time it is delivered, and never taken
    for another."""
    if len(value) <= ID_MAX:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{value[:ID_MAX - len(digest) - 1]}#{digest}"


class InboundImage(BaseModel):
    """An attachment's bytes, ready to become an Image row: an image, or a voice note's
    audio (`audio/…`), which is transcribed before the message is stored."""

    mime_type: str
    data: str  # base64
    size: int
    name: str = ""  # a file's name (a PDF, a text file); images and voice notes have none


class InboundMedia(_Storable):
    """A platform's reference to an attachment, as the webhook saw it. The webhook stores
    only this; the processing task fetches the bytes (`Adapter.fetch_media`)."""

    kind: Literal["photo", "voice", "file"] = "photo"
    file_id: str  # the platform's id to fetch it by
    mime_type: str = ""  # a hint; the fetch decides
    size: int | None = None  # in bytes, when the platform says
    url: str = ""  # where the platform serves it, when the event names that (Slack, Discord)
    name: str = ""  # the file's name as sent


class InboundMessage(_Storable):
    channel: str  # the message's channel tag: telegram, whatsapp, slack_dm, slack, discord_dm, …
    external_id: str  # the platform's id for this message, unique within the binding
    sender_id: str  # the platform's id for the sender
    sender_name: str = ""
    text: str = ""
    group: bool = False  # a group chat: its own session, answered only when addressed
    thread_id: str = ""  # group chat id (a Telegram forum topic: chat|topic), email thread, phone number
    addressed: bool = True  # in a group: the bot was mentioned or replied to
    reply_target: str = ""  # where the answer goes (chat id, channel id, interaction token …)
    media: list[InboundMedia] = Field(default_factory=list)  # fetched by the processing task
    # Images already in hand (events stored before media references were, among them).
    images: list[InboundImage] = Field(default_factory=list)
    # Attachments the webhook could not keep (too large, of a kind not kept, too many):
    # counted with those the processing task cannot fetch, so the model is told.
    left_out: int = 0
    extra: dict = Field(default_factory=dict)
    # Whether the platform proved the sender, where it can be forged (email: the inbound
    # provider's DKIM/SPF verdict); None where the platform vouches for its accounts.
    sender_proven: bool | None = None

    @field_validator("external_id", "sender_id", "thread_id", mode="after")
    @classmethod
    def _id_fits(cls, value: str) -> str:
        return fitting_id(value)

    @field_validator("sender_name", mode="after")
    @classmethod
    def _name_fits(cls, value: str) -> str:
        return value[:NAME_MAX]
