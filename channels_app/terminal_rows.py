"""How many rows of a terminal text takes, and where to cut it to fit one (`qorven chat`
on a terminal: channels_app.terminal_screen)."""
from __future__ import annotations

import re

_SGR = re.compile(r"\x1b\[[0-9;]*m")  # our own colours: the only escapes in what is shown (terminal.shown)


def rows_of(text: str, columns: int) -> int:
    """The rows of a terminal `columns` wide that printing `text` and a line break takes."""
    from prompt_toolkit.utils import get_cwidth

    rows = 0
    for line in _SGR.sub("", text).split("\n"):
        width = 0
        for char in line:
            width += 8 - width % 8 if char == "\t" else max(get_cwidth(char), 0)
        rows += max(1, -(-width // max(columns, 1)))
    return rows


def row_cut(text: str, columns: int) -> tuple[str, str] | None:
    """`text` as (the row it fills, the rest) once it no longer fits a row of `columns`,
    cut at its last space (or, a word longer than the row, at the edge); None while it fits.
    The last column stays free: where the cursor goes after a row that fills it differs
    between terminals."""
    from prompt_toolkit.utils import get_cwidth

    width, space, i = 0, None, 0
    columns = max(columns, 20)
    while i < len(text):
        colour = _SGR.match(text, i)
        if colour:
            i = colour.end()
            continue
        char = text[i]
        if char == " ":
            space = i
        width += 8 - width % 8 if char == "\t" else max(get_cwidth(char), 0)
        if width >= columns:
            return (text[:space], text[space + 1:]) if space else (text[:i], text[i:])
        i += 1
    return None
