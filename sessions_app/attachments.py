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


def images_copy(*, pairs: Sequence[tuple[Message, Message]]) -> int:
    """Give each copied message (`pairs`: original, copy) the attachments of its original,
    in order: a question carried into a fresh session (sessions_app.services.lifecycle.session_rotate)
    is answered with its photo, file or voice note, not with a note that it is no longer
    kept. Returns how many were copied."""
    copy_of = {original.pk: copy for original, copy in pairs}
    if not copy_of:
        return 0
    rows = Image.objects.filter(message_id__in=copy_of).order_by("message_id", "id")
    copies = [
        Image(tenant_id=image.tenant_id, message=copy_of[image.message_id], mime_type=image.mime_type,
              name=image.name, data=image.data, size=image.size, created_at=image.created_at,
              text=image.text, reading=image.reading)
        for image in rows.iterator(chunk_size=20) if image.message_id is not None
    ]
    Image.objects.bulk_create(copies, batch_size=20)
    return len(copies)


def image_reading_save(*, tenant_id: int, image_id: int, reading: str, text: str) -> None:
    """Keep what reading a document gave (its text, or why it has none), once: a row read
    meanwhile by another turn keeps its first reading."""
    Image.objects.filter(tenant_id=tenant_id, pk=image_id, reading__isnull=True).update(
        reading=reading, text=text)
