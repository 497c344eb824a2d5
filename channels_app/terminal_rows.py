"""How many rows of a terminal text takes, and where to cut it to fit one (`qorven chat`
on a terminal: channels_app.terminal_screen).

Widths are counted in cells per grapheme (a letter and its accents, an emoji and its skin
tone, a flag), never splitting one. Terminals disagree on emoji sequences — drawn as one
cluster (2 cells) or character by character (a thumb and its skin tone: 4) — so the wider
count is taken: a row cut to fit fits either way. A row is cut where a line may break
(Unicode's line breaking, UAX #14: after a space or a hyphen, between two ideographs), so
Chinese or Japanese text with no spaces fills its rows too.
"""
from __future__ import annotations

import re

from wcwidth import iter_graphemes, iter_line_breaks
from wcwidth import wcwidth as _char_cells
from wcwidth import width as _cluster_cells

_SGR = re.compile(r"\x1b\[[0-9;]*m")  # our own colours: the only escapes in what is shown (terminal.shown)
_RESET = ("\x1b[0m", "\x1b[m")
# A list item's marker (and the indentation before it): its rows go on under its text.
_ITEM = re.compile(r"[ \t]*(?:[-*+•]|\d{1,3}[.)])[ \t]+(?=\S)|[ \t]+(?=\S)")
MIN_TEXT = 16  # cells: narrower than this beside a hanging indent, rows start nearer the edge
# Begins each further row of a code or table line cut at the edge (cut=True): it says the
# line goes on, where a row of its own would begin a new line of the code.
CONTINUED = "↪ "


def cells(grapheme: str) -> int:
    """The cells one grapheme takes (the wider of the two ways terminals count it)."""
    return max(_cluster_cells(grapheme), sum(max(_char_cells(char), 0) for char in grapheme))


def visible(text: str) -> str:
    """`text` without our colours."""
    return _SGR.sub("", text)


def width_of(text: str) -> int:
    """The cells `text` (one line, with our colours) takes, tabs to their stops."""
    width = 0
    for grapheme in iter_graphemes(_SGR.sub("", text)):
        width += 8 - width % 8 if grapheme == "\t" else cells(grapheme)
    return width


def rows_of(text: str, columns: int) -> int:
    """The rows of a terminal `columns` wide that printing `text` and a line break takes."""
    return sum(max(1, -(-width_of(line) // max(columns, 1))) for line in text.split("\n"))


def hang(*indents: int, columns: int) -> int:
    """The indent of a wrapped line's further rows: the first of `indents` (under its text,
    under the message's) that leaves enough of the row, else near the edge."""
    room = columns - 1
    for indent in indents:
        if room - indent >= MIN_TEXT:
            return indent
    return 2 if room - 2 >= MIN_TEXT // 2 else 0


def item_indent(line: str) -> int:
    """The cells before a line's text when it is a list item or indented: its further rows
    go under that text."""
    marker = _ITEM.match(line)
    return width_of(marker.group()) if marker else 0


def row_cut(text: str, columns: int, *, keep: int = 0, code: bool = False) -> tuple[str, str] | None:
    """`text` (one line) as (the row it fills, the rest) once it no longer fits a row of
    `columns`; None while it fits. Cut at its last break before the edge (not within its
    first `keep` characters, an indent), a word longer than the row at the edge; the spaces
    at the cut are dropped. A colour open at the cut is closed at the row's end and opened
    again on the rest. The last column stays free: where the cursor goes after a row that
    fills it differs between terminals. `code`: a line of code or a table's, cut at the edge
    (before the spaces there) and its spaces kept, as they are part of it."""
    plain, at = _plain(text)
    # An indent wider than the row (the terminal narrowed under a line going on): the row
    # runs past the edge rather than never taking a word.
    room = max(columns - 1, width_of(plain[:keep]) + MIN_TEXT // 2 if keep else 1)
    breaks = [] if code else [b.index for b in iter_line_breaks(plain)
                              if b.index > keep and _between_words(plain, b.index)]
    width, i = 0, 0
    for grapheme in iter_graphemes(plain):
        width += 8 - width % 8 if grapheme == "\t" else cells(grapheme)
        if width > room:
            fits = [b for b in breaks if b <= i]
            cut = i if grapheme.isspace() or not fits else fits[-1]
            while code and cut > keep + 1 and plain[cut - 1] == " ":  # a row's end drops its spaces when shown
                cut -= 1
            if cut <= keep:  # not even this grapheme fits beside the indent: it has the row to itself
                cut = i + len(grapheme)
            return _split(text, at, plain, cut, strip=not code)
        i += len(grapheme)
    return None


def _between_words(plain: str, at: int) -> bool:
    """Whether a break Unicode allows before `plain[at]` is one between words: after a
    space or a word's hyphen, or beside an ideograph or emoji. Not after a slash (a
    command, a path, a link is cut whole or at the edge) or other punctuation."""
    before = plain[at - 1]
    return (before.isspace() or before == "-" and at >= 2 and plain[at - 2].isalpha()
            or cells(before) > 1 or at < len(plain) and cells(plain[at]) > 1)


def fold(text: str, columns: int, *, indent: int, keep: int = 0, code: bool = False) -> list[str]:
    """`text` (one line) as the rows of a terminal `columns` wide, each after the first
    beginning with `indent` spaces (and CONTINUED, for `code`: see row_cut); not cut within
    its first `keep` characters (a mark that begins it)."""
    rows = []
    further = " " * indent + (CONTINUED if code else "")
    while (cut := row_cut(text, columns, keep=keep, code=code)) is not None:
        rows.append(cut[0])
        text, keep = further + cut[1], len(further)
    rows.append(text)
    return rows


def _plain(text: str) -> tuple[str, list[int]]:
    """`text` without our colours, and where each of its characters is in `text` (and its end)."""
    plain: list[str] = []
    at: list[int] = []
    i = 0
    while i < len(text):
        colour = _SGR.match(text, i)
        if colour:
            i = colour.end()
            continue
        plain.append(text[i])
        at.append(i)
        i += 1
    at.append(len(text))
    return "".join(plain), at


def _split(text: str, at: list[int], plain: str, cut: int, *, strip: bool = True) -> tuple[str, str]:
    """`text` cut before plain character `cut`, the spaces on either side dropped (`strip`);
    colours right before the cut go with the rest."""
    end = start = cut
    while strip and end > 0 and plain[end - 1] == " ":
        end -= 1
    while strip and start < len(plain) and plain[start] == " ":
        start += 1
    row_end = at[end - 1] + 1 if end else 0
    row, rest = text[:row_end], text[at[start]:]
    if _open(text[:row_end]):
        row += "\x1b[0m"
    if colour := _open(text[:at[start]]):
        rest = colour + rest
    return row, rest


def _open(text: str) -> str | None:
    """The colour still on at the end of `text`, if any."""
    codes = _SGR.findall(text)
    return codes[-1] if codes and codes[-1] not in _RESET else None
