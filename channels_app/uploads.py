"""Files people attach on the chat page and the webchat: images (JPEG, PNG, GIF, WebP),
PDFs and plain-text files, each checked by its content (Pillow reads an image's header; a
PDF starts with its signature; text must be UTF-8 without control bytes) — the name and
the browser's type are ignored — size-limited (QORVEN_MAX_UPLOAD), and turned into what
becomes an Image row (the attachments table: images and other files)."""
from __future__ import annotations

import base64
import io
from dataclasses import dataclass

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile

ACCEPTED = {"JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif", "WEBP": "image/webp"}
MAX_FILES = 4  # per message


class UploadRefused(ValueError):
    """An upload that is not stored, with what to tell the person and the HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class UploadedImage:
    mime_type: str
    data: str  # base64
    size: int
    name: str = ""  # a file's name as sent (not for images)


def attachment_check(raw: bytes, name: str) -> UploadedImage:
    """One attachment's bytes as what becomes an Image row, by its content; UploadRefused
    when it is too large or of a kind not kept."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    limit = settings.QORVEN_MAX_UPLOAD
    shown = (name or "the file")[:80]
    if len(raw) > limit:
        raise UploadRefused(f"{shown} is larger than {_megabytes(limit)}", 413)
    document = _document_type(raw)
    if document is not None:
        return UploadedImage(mime_type=document, data=base64.b64encode(raw).decode(), size=len(raw),
                             name=_clean_name(name or "file"))
    try:
        with PILImage.open(io.BytesIO(raw)) as picture:
            kind = picture.format or ""
            picture.verify()  # the structure holds together, without decoding every pixel
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, PILImage.DecompressionBombError):
        raise UploadRefused(f"{shown} is not an image (JPEG, PNG, GIF or WebP), a PDF or a text file", 415) from None
    if kind not in ACCEPTED:
        raise UploadRefused(f"{shown} is a {kind or 'kind of'} image; attach JPEG, PNG, GIF or WebP", 415)
    return UploadedImage(mime_type=ACCEPTED[kind], data=base64.b64encode(raw).decode(), size=len(raw))


def images_read(files: list[UploadedFile]) -> list[UploadedImage]:
    """The attached files as images or documents, in order, or UploadRefused for the first
    that cannot be kept (then none is)."""
    if len(files) > MAX_FILES:
        raise UploadRefused(f"attach at most {MAX_FILES} files to one message", 400)
    limit = settings.QORVEN_MAX_UPLOAD
    kept = []
    for upload in files:
        name = upload.name or "the file"
        if upload.size is not None and upload.size > limit:
            raise UploadRefused(f"{name[:80]} is larger than {_megabytes(limit)}", 413)
        kept.append(attachment_check(upload.read(limit + 1), name))
    return kept


def _document_type(raw: bytes) -> str | None:
    """application/pdf or text/plain when the bytes are one, else None (try an image)."""
    if raw.startswith(b"%PDF-"):
        return "application/pdf"
    if not raw or b"\0" in raw:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return "text/plain" if all(c.isprintable() or c in "\n\r\t\f" for c in text) else None


def _clean_name(name: str) -> str:
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    return "".join(c for c in base if c.isprintable())[:255] or "file"


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):g} MB"
