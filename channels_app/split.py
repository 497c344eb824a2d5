"""Split a reply to a platform's length limit without breaking code blocks or characters.

The text is cut into blocks — fenced code blocks whole, prose by paragraph — and packed
greedily into parts. A code block that fits in a part is never split; one longer than a
part is cut by lines, each piece closed and re-opened with the same fence so every part
renders as code.

Lengths are measured the way the platform counts them (`size`: code points by default,
UTF-16 code units for Telegram), and a cut falls between user-perceived characters
(extended grapheme clusters, regex's \\X): an emoji with its skin tone, a family joined by
ZWJs, a flag or a letter with its accents is never shown as two broken halves.
"""
from __future__ import annotations

from collections.abc import Callable

import regex

Size = Callable[[str], int]
_GRAPHEME = regex.compile(r"\X")


def _blocks(text: str) -> list[tuple[str, str]]:
    """[(kind, text)] with kind 'code' (a whole fenced block) or 'prose'."""
    out: list[tuple[str, str]] = []
    lines = text.splitlines(keepends=True)
    buf: list[str] = []
    in_code = False
    fence = ""
    for line in lines:
        stripped = line.lstrip()
        if not in_code and stripped.startswith(("```", "~~~")):
            if buf:
                out.append(("prose", "".join(buf)))
                buf = []
            in_code, fence = True, stripped[:3]
            buf.append(line)
            continue
        buf.append(line)
        if in_code and stripped.startswith(fence) and len(buf) > 1:
            out.append(("code", "".join(buf)))
            buf, in_code = [], False
    if buf:
        out.append(("code" if in_code else "prose", "".join(buf)))
    return out


def _fit(text: str, room: int, size: Size) -> int:
    """The longest prefix of `text` (an index) measuring at most `room` that ends between
    graphemes; at least one code point when `room` allows one, so a single grapheme longer
    than a part (a letter under thousands of marks) is still cut and sent, not looped on."""
    if size(text) <= room:
        return len(text)
    end = used = 0
    for match in _GRAPHEME.finditer(text):
        cost = size(match.group())
        if used + cost > room:
            break
        used += cost
        end = match.end()
    if end == 0:  # not even one grapheme fits: cut it between code points
        while end < len(text) and used + size(text[end]) <= room:
            used += size(text[end])
            end += 1
    return max(end, 1)


def _cut_point(text: str, room: int, size: Size) -> int:
    """Where to cut `text` to fit `room`: after a line break, else a space, else hard."""
    hard = _fit(text, room, size)
    for sep in ("\n", " "):
        cut = text.rfind(sep, 0, hard)
        if cut > 0:
            return cut + 1
    return hard


def _pieces(text: str, room: int, size: Size) -> list[str]:
    """`text` hard-cut into pieces of at most `room`."""
    out = []
    while text:
        cut = _fit(text, room, size)
        out.append(text[:cut])
        text = text[cut:]
    return out


def _cut_code(block: str, limit: int, size: Size) -> list[str]:
    lines = block.splitlines(keepends=True)
    opening = lines[0]
    closing_present = len(lines) > 1 and lines[-1].lstrip().startswith(opening.lstrip()[:3])
    body = lines[1:-1] if closing_present else lines[1:]
    fence = opening.lstrip()[:3]
    close = fence + "\n"
    room = limit - size(opening) - size(close) - 1
    if room <= 0:
        return _pieces(block, limit, size)

    def closed(current: list[str]) -> str:
        return opening + "".join(current) + ("" if not current or current[-1].endswith("\n") else "\n") + close

    pieces: list[str] = []
    current: list[str] = []
    used = 0
    for line in body:
        if size(line) > room:  # a single line longer than a part
            if current:
                pieces.append(closed(current))
                current, used = [], 0
            *whole, line = _pieces(line, room, size)
            pieces.extend(opening + piece + "\n" + close for piece in whole)
        if used + size(line) > room and current:
            pieces.append(closed(current))
            current, used = [], 0
        current.append(line)
        used += size(line)
    if current or not pieces:
        pieces.append(closed(current))
    return pieces


def split_message(text: str, limit: int, *, size: Size = len, min_fill: int = 200) -> list[str]:
    """Parts of at most `limit` (as `size` measures), in order, that together say all of
    `text`. Prose fills each part; code blocks move whole to the next part when they do
    not fit."""
    if size(text) <= limit:
        return [text]
    parts: list[str] = []
    current = ""

    def flush() -> None:
        nonlocal current
        if current.strip():
            parts.append(current.strip("\n"))
        current = ""

    for kind, block in _blocks(text):
        if kind == "code":
            for piece in [block] if size(block) <= limit else _cut_code(block, limit, size):
                if size(current) + size(piece) > limit:
                    flush()
                current += piece
            continue
        rest = block
        while rest:
            room = limit - size(current)
            if size(rest) <= room:
                current += rest
                break
            if room < min_fill and current:
                flush()
                continue
            cut = _cut_point(rest, room, size)
            current += rest[:cut]
            rest = rest[cut:]
            flush()
    flush()
    return parts
