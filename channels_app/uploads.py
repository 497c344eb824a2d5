"""Files people attach on the chat page and the webchat: images (JPEG, PNG, GIF, WebP),
PDFs, plain-text files and voice notes (OGG/Opus, MP3, WAV, M4A/MP4, WebM), each checked by
its content (Pillow reads an image's header; a PDF and audio start with their signature;
text must be UTF-8 without control bytes) — the name and the browser's type are ignored —
size-limited (QORVEN_MAX_UPLOAD), and turned into what becomes an Image row (the
attachments table: images, audio and other files)."""
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
    audio = _audio_type(raw)
    if audio is not None:  # a voice note: transcribed like one from Telegram (qorven.agent.voice)
        return UploadedImage(mime_type=audio, data=base64.b64encode(raw).decode(), size=len(raw))
    document = _document_type(raw)
    if document is not None:
        return UploadedImage(mime_type=document, data=base64.b64encode(raw).decode(), size=len(raw),
                             name=_clean_name(name or "file"))
    try:
        with PILImage.open(io.BytesIO(raw)) as picture:
            kind = picture.format or ""
            picture.verify()  # the structure holds together, without decoding every pixel
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, PILImage.DecompressionBombError):
        raise UploadRefused(f"{shown} is not an image (JPEG, PNG, GIF or WebP), a PDF, a text file or audio",
                            415) from None
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


_MP4_BRANDS = {b"M4A ", b"M4B ", b"mp41", b"mp42", b"isom", b"iso2", b"dash", b"3gp4", b"3gp5"}


def _audio_type(raw: bytes) -> str | None:
    """The audio type the bytes' signature names, else None."""
    if raw.startswith(b"OggS"):
        return "audio/ogg"
    if raw.startswith(b"ID3") or (len(raw) > 1 and raw[0] == 0xFF and raw[1] & 0xE0 == 0xE0 and raw[1] & 0x06):
        return "audio/mpeg"  # an ID3 tag, or an MPEG audio frame (layer bits set: not AAC's ADTS)
    if raw[:4] == b"RIFF" and raw[8:12] == b"WAVE":
        return "audio/wav"
    if raw[4:8] == b"ftyp" and raw[8:12] in _MP4_BRANDS:
        return "audio/mp4"
    if raw.startswith(b"\x1a\x45\xdf\xa3"):  # EBML: what browsers record (MediaRecorder)
        return "audio/webm"
    return None


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
