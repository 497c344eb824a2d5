"""What the model sees of the images and files people sent: for a route that accepts
images, the newest QORVEN_PROMPT_IMAGES of the window as `image_url` content parts (data
URLs); every other one as a short note ("[image: image/jpeg, 240 KB]"), so the model knows
it was sent. Each file gets a note ("[file: report.pdf, application/pdf, 240 KB]"); a text
file or a PDF still kept has its text after the note, newest first, the window's files
sharing QORVEN_PROMPT_FILE_CHARS characters (one cut short says so, those past it keep the
note). A PDF's text is read once, by the first prompt that shows it (qorven.agent.pdf_text);
one without readable text says why in its note ("…, 240 KB; password-protected, …]").

Only messages whose metadata lists `attachments` are looked up (one query for the window),
and only the images that are sent, the text files that are read and the PDFs read for the
first time have their bytes read.
"""
from __future__ import annotations

import base64
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from django.conf import settings

from sessions_app.attachments import image_reading_save
from sessions_app.models import Image, Message
from sessions_app.quoting import framed_name
from sessions_app.selectors import StoredMessage

from .pdf_text import TRUNCATED, pdf_read

# A conservative guess of what one image costs in the model's context window.
IMAGE_TOKENS = 800


def attached_count(message: StoredMessage) -> int:
    """How many images the message came with (a voice note's audio is its text instead)."""
    attachments = (message.metadata or {}).get("attachments") if isinstance(message.metadata, dict) else None
    if not isinstance(attachments, list):
        return 0
    return sum(1 for a in attachments if isinstance(a, dict) and a.get("type", "image") == "image")


def size_label(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MB"
    return f"{max(1, round(size / 1024))} KB"


PDF = "application/pdf"
# What a PDF's note says when it has no text to give (Image.reading).
UNREAD = {
    Image.Reading.NO_TEXT: "no readable text: scanned, or only images",
    Image.Reading.LOCKED: "password-protected, no readable text",
    Image.Reading.UNREADABLE: "could not be read",
}


# What in a file's text reads as the end of its frame ("[end of notes.txt]"), escaped
# ("\[end of …"): the text could end its own frame and go on as the person's words.
_END_OF = re.compile(r"\[(?=[ \t]*end[ \t]+of\b)", re.IGNORECASE)
_ESCAPED = r"\\["


def _files(message: StoredMessage) -> list[dict[str, Any]]:
    metadata = message.metadata if isinstance(message.metadata, dict) else {}
    attachments = metadata.get("attachments")
    return [a for a in (attachments if isinstance(attachments, list) else [])
            if isinstance(a, dict) and a.get("type") == "file"]


def file_notes(message: StoredMessage, texts: dict[int, str | Image.Reading] | None = None) -> list[dict[str, Any]]:
    """A note for each file (not an image, not a voice note) the message came with, so the
    model knows it was sent: "[file: report.pdf, application/pdf, 240 KB]" — followed by
    its text where `texts` has it (by the file's index among the message's files), or
    saying why a PDF has none (an Image.Reading there). The name and the text are the
    sender's: the name keeps no brackets or line breaks, and a line of the text that reads
    as the note's end is escaped, so only our own line ends it."""
    metadata = message.metadata if isinstance(message.metadata, dict) else {}
    notes = []
    for i, a in enumerate(_files(message)):
        name = framed_name(a.get("name") or "") or "file"
        label = f"{name}, {framed_name(a.get('mime_type') or '')}, {size_label(int(a.get('size') or 0))}"
        got = texts.get(i) if texts else None
        if isinstance(got, Image.Reading):  # never a file's text, which may say anything
            note = f"[file: {label}; {UNREAD.get(got, UNREAD[Image.Reading.UNREADABLE])}]"
        elif got is not None:
            note = f"[file: {label}]\n{_END_OF.sub(_ESCAPED, got)}\n[end of {name}]"
        else:
            note = f"[file: {label}]"
        notes.append({"type": "text", "text": note})
    left_out = metadata.get("left_out")
    if isinstance(left_out, int) and left_out > 0:
        what = "an attachment" if left_out == 1 else f"{left_out} attachments"
        if metadata.get("left_out_why") == "unpaired":  # a stranger's, in a group (channels_app.inbound_media)
            were = "was" if left_out == 1 else "were"
            notes.append({"type": "text", "text": f"[{what} sent with this {were} not kept: its sender is not paired "
                                                  "with this Qor]"})
        else:
            notes.append({"type": "text", "text": f"[{what} sent with this could not be kept: too large, "
                                                  "unreachable, or not an image, a PDF, a text file or audio]"})
    return notes


def image_parts(window: Sequence[StoredMessage], *, vision: bool) -> dict[int, list[dict[str, Any]]]:
    """For each user message of `window` that came with images: the content parts that
    follow its text, in the order they were sent (by message pk)."""
    # Most messages came with nothing: only those whose metadata lists attachments (or
    # says some were left out) are looked at again, not every message of a full window.
    sent_with = [m for m in window if m.role == Message.Role.USER and isinstance(m.metadata, dict)
                 and ("attachments" in m.metadata or "left_out" in m.metadata)]
    parts: dict[int, list[dict[str, Any]]] = {}
    if not sent_with:
        return parts
    texts = file_texts(sent_with)
    for message in sent_with:
        if notes := file_notes(message, texts.get(message.pk)):
            parts[message.pk] = notes
    described = [m for m in sent_with if attached_count(m)]
    if not described:
        return parts
    seq_of = {m.pk: m.seq for m in described}
    rows: list[Any] = list(Image.objects.filter(message_id__in=seq_of, mime_type__startswith="image/")
                .order_by("id").values("id", "message_id", "mime_type", "size"))
    newest_first = sorted(rows, key=lambda r: (seq_of[r["message_id"]], r["id"]), reverse=True)
    sent = [r["id"] for r in newest_first[: settings.QORVEN_PROMPT_IMAGES]] if vision else []
    data = dict(Image.objects.filter(pk__in=sent).values_list("id", "data")) if sent else {}
    stored: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        stored[row["message_id"]].append(row)
    for message in described:
        out: list[dict[str, Any]] = []
        images = [a for a in message.metadata["attachments"] if a.get("type", "image") == "image"]
        for i, described_image in enumerate(images):
            kept = stored[message.pk][i] if i < len(stored[message.pk]) else None
            if kept is not None and kept["id"] in data:
                url = f"data:{kept['mime_type']};base64,{data[kept['id']]}"
                out.append({"type": "image_url", "image_url": {"url": url}})
                continue
            mime = (kept or described_image).get("mime_type", "image")
            size = (kept or described_image).get("size") or 0
            gone = "" if kept is not None else ", no longer kept"
            out.append({"type": "text", "text": f"[image: {mime}, {size_label(int(size))}{gone}]"})
        parts[message.pk] = out + parts.get(message.pk, [])
    return parts


def _readable(mime: Any) -> bool:
    return str(mime).startswith("text/") or mime == PDF


def file_texts(window: Sequence[StoredMessage]) -> dict[int, dict[int, str | Image.Reading]]:
    """The text of the UTF-8 text files and PDFs the window's user messages came with and
    that are still kept, as {message pk: {file index: text}}: newest first, sharing
    QORVEN_PROMPT_FILE_CHARS characters; the one the budget runs out in is cut short with
    TRUNCATED, older ones are left to their note. A PDF with no text to give has its
    Image.Reading there instead (it takes none of the budget)."""
    budget = settings.QORVEN_PROMPT_FILE_CHARS
    with_text = {m.pk: m.seq for m in window if m.role == Message.Role.USER
                 and any(_readable(a.get("mime_type", "")) for a in _files(m))}
    if budget <= 0 or not with_text:
        return {}
    rows = list(Image.objects.filter(message_id__in=with_text).exclude(mime_type__startswith="image/")
                .exclude(mime_type__startswith="audio/").order_by("id")
                .values_list("id", "message_id", "mime_type", "reading"))
    index: dict[int, int] = defaultdict(int)  # the files of each message, in the order they were sent
    placed = []
    for pk, message_id, mime, reading in rows:
        if _readable(mime):
            placed.append((with_text[message_id], pk, message_id, index[message_id], mime == PDF, reading))
        index[message_id] += 1
    texts: dict[int, dict[int, str | Image.Reading]] = defaultdict(dict)
    for _, pk, message_id, i, is_pdf, reading in sorted(placed, reverse=True):  # newest first
        if budget <= 0:
            break
        if is_pdf:
            reading, text = _pdf_text(pk, reading)
            if reading != Image.Reading.TEXT:
                texts[message_id][i] = Image.Reading(reading)
                continue
        else:
            data = Image.objects.filter(pk=pk).values_list("data", flat=True).first() or ""
            text = base64.b64decode(data).decode("utf-8", errors="replace")
        if len(text) > budget:
            text = f"{text[:budget]}\n{TRUNCATED}"
        budget -= len(text)
        texts[message_id][i] = text
    return texts


def _pdf_text(pk: int, reading: str | None) -> tuple[str, str]:
    """A PDF attachment's reading and text: as stored, or read now, once, and stored."""
    if reading is not None:
        if reading not in Image.Reading.values:
            return Image.Reading.UNREADABLE, ""
        return reading, Image.objects.filter(pk=pk).values_list("text", flat=True).first() or ""
    row = Image.objects.filter(pk=pk).values_list("tenant_id", "data").first()
    if row is None:  # cleared meanwhile (the images beat): its note only
        return Image.Reading.UNREADABLE, ""
    tenant_id, data = row
    try:
        raw = base64.b64decode(data)
    except ValueError:
        raw = b""
    got = pdf_read(raw)
    image_reading_save(tenant_id=tenant_id, image_id=pk, reading=got.reading, text=got.text)
    return got.reading, got.text
