"""What was said, quoted inside an answer of ours (`/search`, `/history`) so it cannot
take the answer over.

Those answers go to the platforms as text of ours, not the model's Markdown
(channels_app.formatting): escaped for Telegram's HTML and Slack's mrkdwn, as they are to
WhatsApp (whose formatting has no escape) and Discord; and to the chat page and terminal
(our markdown subset, escaped first). A message quoted there as it
was written could make the rest of the answer a code block, bold, strike, hide
(Discord's spoilers) or link it, ping a channel, or start a line that passes for another
line of ours. Quoted with `inert`, it is one line whose characters that open formatting
are look-alikes that format nothing.
"""
from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from .channel_kinds import Channel

# Formatting characters of Slack, Discord, WhatsApp and the chat page's markdown, as
# look-alikes that format nothing (`<` and `>` also open Slack's mentions and links).
_INERT = str.maketrans({"`": "ˋ", "*": "∗", "_": "ˍ", "~": "∼", "|": "ǀ", "<": "‹", ">": "›"})
# Bidirectional controls would reorder the rest of the line the text sits in.
_BIDI = dict.fromkeys([*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C])


# What a name quoted inside our framing ("[telegram] NAME: …", "[file: NAME, …]") may not
# hold: a bracket would close the tag it sits in or open one that reads as ours.
_FRAMED = str.maketrans({"[": "(", "]": ")"})
# Where a model reads a new line.
_BREAKS = "\n\r\v\f\x1c-\x1e\x85\u2028\u2029"
# What our framing begins a line with: a sender's tag ("[telegram] Priya:", "[web · lower
# trust] Alice:"), a note of what came with a message ("[file: …]", "[end of …]",
# "[image: …]", "[voice note]", "[2 attachments sent …]"), and anything else shaped like a
# sender's line ("[Web chat] Alice: …"), which a model reads as one whatever the tag says.
_CHANNELS = "|".join(re.escape(value) for value in sorted(Channel.values, key=len, reverse=True))
_OUR_TAG = (
    rf"[ \t]*(?:(?:{_CHANNELS})[ \t]*(?:\]|·)"
    r"|(?:file|image)[ \t]*:|end[ \t]+of\b|voice[ \t]+note[ \t]*\]|(?:an|\d+)[ \t]+attachments?[ \t]+sent\b"
    rf"|[^\]{_BREAKS}]*\][ \t]*[^\s:\]][^:{_BREAKS}]{{0,63}}:)"
)
# A line of a quoted text that begins (after spaces) with what reads as our framing.
_TAG_AFTER_BREAK = re.compile(rf"([{_BREAKS}][ \t]*)\[(?={_OUR_TAG})", re.IGNORECASE)


def framed_name(name: str) -> str:
    """A sender's or a file's name as our framing quotes it to the model: on one line,
    without control or bidirectional characters, its brackets as parentheses — so a name
    cannot end the tag it sits in, or start a line that reads as another sender's or ours."""
    return plain(name).translate(_FRAMED)


def sender_labels(messages: Iterable[Any]) -> dict[int, str]:
    """For each user message of `messages` whose sender shares a name (as framed) with
    another sender among them on the same surface: that name with a short mark of who
    wrote it, the same for them in every prompt ("Alice [id 3f2a]"), keyed by the
    message's pk. In brackets, which a framed name cannot hold, so no name passes for it."""
    senders: dict[int, tuple[str, str, str]] = {}
    keys: dict[tuple[str, str], set[str]] = defaultdict(set)
    for message in messages:
        if message.role != "user":
            continue
        name = framed_name(message.sender_name) or "user"
        key = _sender_key(message.metadata)
        senders[message.pk] = (message.channel, name, key)
        keys[(message.channel, name)].add(key)
    labels = {}
    for pk, (channel, name, key) in senders.items():
        sharing = keys[(channel, name)]
        if len(sharing) > 1:
            labels[pk] = f"{name} [id {_mark(key, sharing)}]"
    return labels


def _sender_key(metadata: object) -> str:
    """Who wrote a message: the platform account (binding and sender id), else the person."""
    meta = metadata if isinstance(metadata, dict) else {}
    if meta.get("sender_id"):
        return f"{meta.get('binding')}:{meta['sender_id']}"
    return f"user:{meta['user_id']}" if meta.get("user_id") else ""


def _mark(key: str, sharing: set[str]) -> str:
    """A few hex digits of `key`'s hash: four, more only when they would not tell the
    senders of one name apart."""
    size = 4
    while len({hashlib.sha256(k.encode()).hexdigest()[:size] for k in sharing}) < len(sharing) and size < 64:
        size += 2
    return hashlib.sha256(key.encode()).hexdigest()[:size]


def framed_lines(text: str) -> str:
    """A message's text as it reads after our tag ("[web] Alice: TEXT"): a line of it after
    the first that begins as our framing does (a sender's tag, a note of ours, or the shape
    of a sender's line: "[…] Name:") has its "[" escaped ("\\["), so it cannot pass for a
    tag of ours and speak as another sender. Every other line as written: "[server]" in a
    pasted config, "[x] done" in a checklist."""
    return _TAG_AFTER_BREAK.sub(r"\1\\[", text)


def inert(text: str) -> str:
    """`text` on one line with nothing in it a surface reads as formatting: no line breaks
    (a quote, a heading, a list, a fence), no control or bidirectional characters,
    formatting characters as look-alikes, and no `](` that would make a masked link."""
    return plain(text).translate(_INERT).replace("](", "] (")


def plain(text: str) -> str:
    """`text` on one line, without control or bidirectional characters."""
    return "".join(c for c in one_line(text) if unicodedata.category(c) != "Cc").translate(_BIDI)


def one_line(text: str) -> str:
    """`text` with every run of white space (line breaks among them) as one space."""
    return " ".join(text.split())
