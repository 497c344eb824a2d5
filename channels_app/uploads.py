"""Images people attach on the chat page and the webchat: checked by their content (Pillow
reads the header; the name and the browser's type are ignored), size-limited
(QORVEN_MAX_UPLOAD), and turned into what becomes an Image row."""
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


def images_read(files: list[UploadedFile]) -> list[UploadedImage]:
    """The attached files as images, in order, or UploadRefused for the first that cannot
    be one (then none is kept)."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    if len(files) > MAX_FILES:
        raise UploadRefused(f"attach at most {MAX_FILES} images to one message", 400)
    limit = settings.QORVEN_MAX_UPLOAD
    images = []
    for upload in files:
        name = (upload.name or "the file")[:80]
        if upload.size is not None and upload.size > limit:
            raise UploadRefused(f"{name} is larger than {_megabytes(limit)}", 413)
        raw = upload.read(limit + 1)
        if len(raw) > limit:
            raise UploadRefused(f"{name} is larger than {_megabytes(limit)}", 413)
        try:
            with PILImage.open(io.BytesIO(raw)) as picture:
                kind = picture.format or ""
                picture.verify()  # the structure holds together, without decoding every pixel
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError, PILImage.DecompressionBombError):
            raise UploadRefused(f"{name} is not an image (JPEG, PNG, GIF or WebP)", 415) from None
        if kind not in ACCEPTED:
            raise UploadRefused(f"{name} is a {kind or 'kind of'} image; attach JPEG, PNG, GIF or WebP", 415)
        images.append(UploadedImage(mime_type=ACCEPTED[kind], data=base64.b64encode(raw).decode(), size=len(raw)))
    return images


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):g} MB"
