"""A reply's parts, written for their platform and each within its limit.

The Markdown is split first and each part written on its own: every part is parsed whole,
so its tags (Telegram's) and markers (Slack's, WhatsApp's) are balanced in it by
construction, and a part a platform refuses to parse is that part alone. The split keeps
the reply's top-level blocks — paragraphs, lists, tables, quotes, code blocks — whole,
packed into as few parts as fit; a block longer than a part is cut by
channels_app.split (a code block by its lines, closed and re-opened with its fence in
each part; one in a quote or a list item likewise, in it: channels_app.formatting.seams)
small enough that what is written of each piece fits; a table's row wider than a part, at
the top level or in a quote or a list item, is written as its cells first
(channels_app.formatting.tables). A part's length is
measured on what the platform counts: Telegram's on the text it shows, its tags read.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any

from ..split import Verbatim, split_message
from .render import Style, parser
from .seams import MarkdownSeams
from .tables import unfold_wide_rows

Size = Callable[[str], int]
BETWEEN_BLOCKS = 2  # the blank line between two blocks written in one part
EMPTY = "(empty reply)"
_LINES = re.compile(r"[^\n]*\n|[^\n]+\Z")


def reply_parts(text: str, *, style: Style, limit: int, size: Size, markdown: bool) -> list[str]:
    """`text` in parts of at most `limit` (as `size` counts what `style` shows), written in
    `style`: the model's Markdown (`markdown`) converted, else text of ours kept as it reads."""
    env: dict[str, Any] = {}
    convert: Callable[[str], str] = style.plain
    chunks = [text]
    written: dict[str, str] = {}  # what was written of a text, written again as it is (measured, then cut)
    if markdown:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        tokens = parser().parse(text, env)  # env: the reply's link references, for every part
        read = style.read_as(text, tokens)
        if read != text:
            text, tokens = read, parser().parse(read, env)
        whole = written[text] = style.parsed(text, tokens)
        if size(style.visible(whole)) <= limit and style.visible(whole).strip():
            return [whole]  # most replies: one part, parsed once
        convert = partial(style.markdown, env=env)
        unfolded = unfold_wide_rows(text, tokens, lambda rows: size(style.visible(convert(rows))) > limit)
        if unfolded != text:  # a table's row too wide for a part: its cells as lines
            text, tokens = unfolded, parser().parse(unfolded, env)
        chunks = _chunks(text, sorted({t.map[0] for t in tokens if t.level == 0 and t.nesting >= 0 and t.map}))

    def write(source: str) -> str:
        if source not in written:
            written[source] = convert(source)
        return written[source]

    def measure(written: str) -> int:
        return size(style.visible(written))

    parts: list[str] = []
    packed: list[str] = []
    used = 0

    def flush() -> None:
        nonlocal packed, used
        if packed:
            parts.extend(_fitted("".join(packed), limit=limit, size=size, write=write, measure=measure,
                                 env=env if markdown else None, as_text=style.plain))
        packed, used = [], 0

    for chunk in chunks:
        cost = measure(write(chunk))
        if cost > limit:  # cut anyway: its first piece fills the part begun, as prose always did
            packed.append(chunk)
            flush()
            continue
        if packed and used + BETWEEN_BLOCKS + cost > limit:  # a block that fits a part is kept whole
            flush()
        packed.append(chunk)
        used += cost + (BETWEEN_BLOCKS if used else 0)
    flush()
    shown = [part for part in parts if style.visible(part).strip()]
    if shown:
        return shown
    if markdown and text.strip():  # Markdown that shows nothing (a lone link definition): as written
        return reply_parts(text, style=style, limit=limit, size=size, markdown=False)
    return reply_parts(EMPTY, style=style, limit=limit, size=size, markdown=False)  # cut like any text


def _chunks(text: str, starts: list[int]) -> list[str]:
    """`text` cut before each top-level block's first line (markdown-it's line map):
    contiguous slices that together are `text`, each block with the blank lines after it."""
    lines = _LINES.findall(text)
    bounds = [0, *(s for s in starts if s > 0), len(lines)]
    return ["".join(lines[a:b]) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def _fitted(source: str, *, limit: int, size: Size, write: Callable[[str], str],
            measure: Callable[[str], int], env: dict[str, Any] | None,
            as_text: Callable[[str], str]) -> list[str]:
    """`source` written in parts that each measure at most `limit`: whole when it fits, else
    cut (channels_app.split) at a size scaled by how much writing changes it (Telegram
    shows a link's label, not its address; Slack's escapes are longer), and while a piece
    written still measures more, cut again smaller, every piece alike — so no short piece is
    left between full ones. `env`: the reply's link references when `source` is its
    Markdown, cut where channels_app.formatting.seams says, each piece made whole; else
    `source` is text of ours, cut as text (its ``` are characters: no fence is added).
    Markdown that cannot be cut so (an address, or a code block's fences, longer than a
    part) is cut as text and written with `as_text`: a piece of it written as Markdown could
    show less than it holds ("```py" is an empty code block)."""
    whole = write(source)
    cost = measure(whole)
    if cost <= limit:
        return [whole]
    length = size(source)
    room = max(1, min(length - 1, length * limit // max(cost, 1)))
    seams: MarkdownSeams | Verbatim = MarkdownSeams(source, env) if env is not None else Verbatim(source, code=False)

    def framing(opening: str) -> int:
        """What the platform shows of a code block's fences (Telegram: nothing, not even
        the language; Slack and WhatsApp: their own, without it)."""
        fence = opening.strip()[:1] * (len(opening.strip()) - len(opening.strip().lstrip("`~")))
        return max(0, measure(write(f"{opening}x\n{fence}\n")) - size("x"))

    while True:
        written = [write(piece) for piece in split_message(source, room, size=size, seams=seams, framing=framing)]
        most = max((measure(w) for w in written), default=0)
        if most <= limit or room == 1 and isinstance(seams, Verbatim):
            return written
        if room == 1:  # what cannot be kept whole in a part (an address longer than it) is cut as text
            seams, write, room = Verbatim(source, code=False), as_text, max(1, min(length - 1, length * limit // max(cost, 1)))
            continue
        room = max(1, min(room - 1, room * limit // most))
