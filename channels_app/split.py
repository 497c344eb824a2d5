"""Split a reply to a platform's length limit without breaking code blocks.

The text is cut into blocks — fenced code blocks whole, prose by paragraph — and packed
greedily into parts. A code block that fits in a part is never split; one longer than a
part is cut by lines, each piece closed and re-opened with the same fence so every part
renders as code.
"""
from __future__ import annotations




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


def _cut_point(text: str, room: int) -> int:
    """Where to cut `text` to fit `room`: after a line break, else a space, else hard."""
    for sep in ("\n", " "):
        cut = text.rfind(sep, 0, room)
        if cut > 0:
            return cut + 1
    return room


def _cut_code(block: str, limit: int) -> list[str]:
    lines = block.splitlines(keepends=True)
    opening = lines[0]
    closing_present = len(lines) > 1 and lines[-1].lstrip().startswith(opening.lstrip()[:3])
    body = lines[1:-1] if closing_present else lines[1:]
    fence = opening.lstrip()[:3]
    close = fence + "\n"
    room = limit - len(opening) - len(close) - 1
    if room <= 0:
        return [block[i : i + limit] for i in range(0, len(block), limit)]
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for line in body:
        while len(line) > room:  # a single line longer than a part
            if current:
                pieces.append(opening + "".join(current) + ("" if current[-1].endswith("\n") else "\n") + close)
                current, size = [], 0
            pieces.append(opening + line[:room] + "\n" + close)
            line = line[room:]
        if size + len(line) > room and current:
            pieces.append(opening + "".join(current) + ("" if current[-1].endswith("\n") else "\n") + close)
            current, size = [], 0
        current.append(line)
        size += len(line)
    if current or not pieces:
        pieces.append(opening + "".join(current) + ("" if not current or current[-1].endswith("\n") else "\n") + close)
    return pieces


def split_message(text: str, limit: int, *, min_fill: int = 200) -> list[str]:
    """Parts of at most `limit` characters, in order, that together say all of `text`.
    Prose fills each part; code blocks move whole to the next part when they do not fit."""
    if len(text) <= limit:
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
            for piece in [block] if len(block) <= limit else _cut_code(block, limit):
                if len(current) + len(piece) > limit:
                    flush()
                current += piece
            continue
        rest = block
        while rest:
            room = limit - len(current)
            if len(rest) <= room:
                current += rest
                break
            if room < min_fill:
                flush()
                continue
            cut = _cut_point(rest, room)
            current += rest[:cut]
            rest = rest[cut:]
            flush()
    flush()
    return parts
