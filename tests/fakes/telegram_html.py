"""Telegram's HTML parse mode, as the Bot API reads a sendMessage with parse_mode "HTML":
strictly enough to refuse what Telegram refuses (its server's parser, TDLib's parse_html,
and the errors its tests expect), and to count what it then shows.

Only the documented tags are taken; every `<` opens a tag (a bare one is an unsupported
start tag with an empty name), every start tag must be closed by its own end tag (or by
`</>`), and `&lt;`, `&gt;`, `&amp;`, `&quot;` and numeric entities are decoded (any other
`&` is kept as written). The visible text is what the 4096 characters are counted on, in
UTF-16 code units.
"""
from __future__ import annotations

import re

TAGS = frozenset({"a", "b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler",
                  "tg-emoji", "code", "pre", "blockquote"})
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_ENTITY = re.compile(r"&(?:(lt|gt|amp|quot)|#(\d+)|#x([0-9a-fA-F]+));")
_NAME = re.compile(r"[A-Za-z0-9-]*")
LIMIT = 4096


class Refused(Exception):
    """What Telegram answers such a message with (400)."""


def _offset(markup: str, index: int) -> int:
    return len(markup[:index].encode())


def visible_text(markup: str) -> str:
    """The text Telegram shows for `markup`, its tags read; raises Refused as Telegram would."""
    out: list[str] = []
    stack: list[str] = []
    i = 0
    while i < len(markup):
        char = markup[i]
        if char == "&":
            entity = _ENTITY.match(markup, i)
            if entity is None:
                out.append("&")
                i += 1
                continue
            named, decimal, hexa = entity.groups()
            out.append(_NAMED[named] if named else chr(int(decimal) if decimal else int(hexa, 16)))
            i = entity.end()
            continue
        if char != "<":
            out.append(char)
            i += 1
            continue
        end = markup.find(">", i)
        if markup.startswith("</", i):
            if end < 0 or not stack:
                raise Refused(f"Unexpected end tag at byte offset {_offset(markup, i)}")
            name = markup[i + 2:end].strip().lower()
            opened = stack.pop()
            if name and name != opened:
                raise Refused(f'Unmatched end tag at byte offset {_offset(markup, i)}, expected "</{opened}>", '
                              f'found "</{name}>"')
            i = end + 1
            continue
        name = _NAME.match(markup, i + 1).group().lower()  # type: ignore[union-attr]
        if name not in TAGS:
            raise Refused(f'Unsupported start tag "{name}" at byte offset {_offset(markup, i)}')
        if end < 0:
            raise Refused(f"Unclosed start tag at byte offset {_offset(markup, i)}")
        stack.append(name)
        i = end + 1
    if stack:
        raise Refused(f"Can't find end tag corresponding to start tag \"{stack[-1]}\"")
    return "".join(out)


def refusal(body: dict) -> str | None:
    """Telegram's description of why it refuses a sendMessage `body`, or None when it takes it."""
    text = str(body.get("text") or "")
    if body.get("parse_mode") == "HTML":
        try:
            text = visible_text(text)
        except Refused as exc:
            return f"Bad Request: can't parse entities: {exc}"
    elif body.get("parse_mode"):
        return "Bad Request: unsupported parse_mode"
    if not text.strip():
        return "Bad Request: message text is empty"
    if len(text.encode("utf-16-le")) // 2 > LIMIT:
        return "Bad Request: message is too long"
    return None


_TAG = re.compile(r"<(/?)([A-Za-z-]*)([^>]*)>")


def formatted_chars(markup: str) -> list[tuple[str, frozenset[str]]]:
    """Each character Telegram shows for `markup` (a valid part: see `visible_text`) with
    the formatting it shows it in: the tags it is inside, a link's with its address."""
    visible_text(markup)  # refuse what Telegram refuses
    out: list[tuple[str, frozenset[str]]] = []
    stack: list[str] = []
    at = 0
    for tag in [*_TAG.finditer(markup), None]:
        text = markup[at:tag.start() if tag else len(markup)]
        form = frozenset(stack)
        out.extend((char, form) for char in visible_text(text))
        if tag is None:
            break
        closing, name, attrs = tag.groups()
        if closing:
            stack.pop()
        else:
            href = re.search(r'href="([^"]*)"', attrs)
            stack.append(f"{name.lower()} {href.group(1)}" if href else name.lower())
        at = tag.end()
    return out
