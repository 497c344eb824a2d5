"""What the model sees of the images and files people sent: for a route that accepts
images, the newest QORVEN_PROMPT_IMAGES of the window as `image_url` content parts (data
URLs); every other one as a short note ("[image: image/jpeg, 240 KB]"), so the model knows
it was sent. Each file gets a note ("[file: report.pdf, application/pdf, 240 KB]"); a text
file still kept has its text after the note, newest first, the window's files sharing
QORVEN_PROMPT_FILE_CHARS characters (one cut short says so, those past it keep the note).

Only messages whose metadata lists `attachments` are looked up (one query for the window),
and only the images that are sent and the text files that are read have their bytes read.
"""
from __future__ import annotations

import base64
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from django.conf import settings

from sessions_app.models import Image, Message
from sessions_app.selectors import StoredMessage

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


TRUNCATED = "[… truncated]"


def _files(message: StoredMessage) -> list[dict[str, Any]]:
    metadata = message.metadata if isinstance(message.metadata, dict) else {}
    attachments = metadata.get("attachments")
    return [a for a in (attachments if isinstance(attachments, list) else [])
            if isinstance(a, dict) and a.get("type") == "file"]


def file_notes(message: StoredMessage, texts: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """A note for each file (not an image, not a voice note) the message came with, so the
    model knows it was sent: "[file: report.pdf, application/pdf, 240 KB]" — followed by
    its text where `texts` has it (by the file's index among the message's files)."""
    metadata = message.metadata if isinstance(message.metadata, dict) else {}
    notes = []
    for i, a in enumerate(_files(message)):
        name = a.get("name") or "file"
        note = f"[file: {name}, {a.get('mime_type', '')}, {size_label(int(a.get('size') or 0))}]"
        if texts and i in texts:
            note = f"{note}\n{texts[i]}\n[end of {name}]"
        notes.append({"type": "text", "text": note})
    left_out = metadata.get("left_out")
    if isinstance(left_out, int) and left_out > 0:
        what = "an attachment" if left_out == 1 else f"{left_out} attachments"
        notes.append({"type": "text", "text": f"[{what} sent with this could not be kept: too large, unreachable, "
                                              "or not an image, a PDF, a text file or audio]"})
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


def file_texts(window: Sequence[StoredMessage]) -> dict[int, dict[int, str]]:
    """The text of the UTF-8 text files the window's user messages came with and that are
    still kept, as {message pk: {file index: text}}: newest first, sharing
    QORVEN_PROMPT_FILE_CHARS characters; the one the budget runs out in is cut short with
    TRUNCATED, older ones are left to their note."""
    budget = settings.QORVEN_PROMPT_FILE_CHARS
    with_text = {m.pk: m.seq for m in window if m.role == Message.Role.USER
                 and any(str(a.get("mime_type", "")).startswith("text/") for a in _files(m))}
    if budget <= 0 or not with_text:
        return {}
    rows = list(Image.objects.filter(message_id__in=with_text).exclude(mime_type__startswith="image/")
                .exclude(mime_type__startswith="audio/").order_by("id").values_list("id", "message_id", "mime_type"))
    index: dict[int, int] = defaultdict(int)  # the files of each message, in the order they were sent
    placed = []
    for pk, message_id, mime in rows:
        if mime.startswith("text/"):
            placed.append((with_text[message_id], pk, message_id, index[message_id]))
        index[message_id] += 1
    texts: dict[int, dict[int, str]] = defaultdict(dict)
    for _, pk, message_id, i in sorted(placed, reverse=True):  # newest first
        if budget <= 0:
            break
        data = Image.objects.filter(pk=pk).values_list("data", flat=True).first() or ""
        text = base64.b64decode(data).decode("utf-8", errors="replace")
        if len(text) > budget:
            text = f"{text[:budget]}\n{TRUNCATED}"
        budget -= len(text)
        texts[message_id][i] = text
    return texts
