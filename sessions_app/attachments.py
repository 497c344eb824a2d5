"""A message's attachments: how they are described in its metadata and stored beside it."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from .models import Image, Message


class ImageBytes(Protocol):
    """An image in hand: what becomes an Image row."""

    mime_type: str
    data: str  # base64
    size: int  # decoded bytes


def attachments_meta(images: Sequence[ImageBytes]) -> list[dict[str, Any]]:
    """How a message's images are described in its metadata (`attachments`), so every
    surface can show them without reading the images table."""
    described = []
    for i in images:
        kind = "audio" if i.mime_type.startswith("audio/") else "image" if i.mime_type.startswith("image/") else "file"
        entry: dict[str, Any] = {"type": kind, "mime_type": i.mime_type, "size": i.size}
        if kind == "file":
            entry["name"] = getattr(i, "name", "") or "file"
        described.append(entry)
    return described


def images_attach(*, message: Message, images: Sequence[ImageBytes]) -> int:
    """Attach `images` to a stored message, in order, once: a re-run finds them there.
    Returns how many were stored."""
    if not images or Image.objects.filter(message=message).exists():
        return 0
    Image.objects.bulk_create(
        Image(tenant_id=message.tenant_id, message=message, mime_type=i.mime_type, data=i.data, size=i.size,
              name=getattr(i, "name", "") or "")
        for i in images
    )
    return len(images)
