"""Whether a cut in a paragraph's text would make a table of lines the whole reads as text
(channels_app.formatting.cut_checks refuses such a cut).

A table interrupts a paragraph where a line with a "|" has, on the line under it, a
delimiter row ("|---|:-:|") of as many columns. In a paragraph no line does (else it would
be a table), but the rest of a line cut inside it may: "x | a | b |" over "|---|---|" is a
header of three columns and a row of two — text — while a piece begun at "a | b |" is a
table of two, its header shown in bold and its delimiter row not at all; and a piece that
ends inside a delimiter row ("|---|---| ---|") may end in one as wide as the line above.
The columns are counted as markdown-it's table rule counts them (its `escapedSplit`: a
"|" right after a backslash separates nothing), from where each line's "|"s are, found
once, so a cut tried at every space of a long line costs no reading of the line.
"""
from __future__ import annotations

import re
from bisect import bisect_left, bisect_right

_ROW_CHARS = re.compile(r"[-|: \t]*")
_ALIGN = re.compile(r":?-+:?")


class TableCuts:
    """The lines of one paragraph's inline text (`content`: its lines, their quotes'
    markers left out), read for the columns a piece of them would make."""

    def __init__(self, content: str) -> None:
        self.content = content
        self.starts = [0, *(m.end() for m in re.finditer("\n", content))]
        # The "|"s that separate cells, by where they are (one after a backslash does not).
        self.pipes = [m.start() for m in re.finditer(r"\|", content) if content[m.start() - 1:m.start()] != "\\"]
        self._rows: dict[int, int | None] = {}  # a line's columns read as a delimiter row
        self._chars: dict[int, int] = {}  # where a line's run of a delimiter row's characters ends

    def opens_table(self, offset: int, *, after: bool) -> bool:
        """Whether a piece begun at `offset`, its line's rest then the line under it, reads
        as a table; `after`: what the piece begins with before it (a marker reopened, a
        list item's "…"), so a "|" beginning the rest begins no longer the line."""
        line = bisect_right(self.starts, offset) - 1
        if line + 1 >= len(self.starts):
            return False
        columns = self._row(line + 1)
        if columns is None:
            return False
        return self._header_of(offset, self._end(line), columns, after=after)

    def ends_table(self, begun: int, offset: int, *, after: bool) -> bool:
        """Whether a piece begun at `begun` (`after` as for `opens_table`) and ended at
        `offset` ends in a delimiter row (its line up to `offset`) under a header in it."""
        line = bisect_right(self.starts, offset) - 1
        if line == 0 or self.starts[line] < begun or offset >= self._end(line):
            return False  # no line above in the piece, or the whole line: as the whole read it
        if offset > self._row_chars(line):
            return False
        columns = _delimiter_columns(self.content[self.starts[line]:offset])
        if columns is None:
            return False
        above = self.starts[line - 1]
        return self._header_of(max(begun, above), self._end(line - 1), columns, after=after and begun > above)

    def _header_of(self, low: int, high: int, columns: int, *, after: bool) -> bool:
        """Whether the text from `low` to `high` is the header of a table of `columns`; after
        what a piece begins with (`after`), a "|" beginning it begins no longer the line."""
        header = self._columns(low, high)
        if header == columns:
            return True
        return after and header is not None and self.content[low:high].lstrip().startswith("|") and header + 1 == columns

    def _row(self, line: int) -> int | None:
        """The columns of `line` read as a delimiter row; None where it is none."""
        if line not in self._rows:
            self._rows[line] = _delimiter_columns(self.content[self.starts[line]:self._end(line)])
        return self._rows[line]

    def _row_chars(self, line: int) -> int:
        """Where the characters a delimiter row is made of, from the start of `line`, end."""
        if line not in self._chars:
            self._chars[line] = _ROW_CHARS.match(self.content, self.starts[line]).end()  # type: ignore[union-attr]
        return self._chars[line]

    def _columns(self, low: int, high: int) -> int | None:
        """The columns of the text from `low` to `high` read as a table's header; None where
        it holds no "|" (no header)."""
        text = self.content[low:high]
        first = low + len(text) - len(text.lstrip())
        last = low + len(text.rstrip())
        if first >= last or "|" not in self.content[first:last] or _indent(text) >= 4:
            return None
        separators = bisect_left(self.pipes, last) - bisect_left(self.pipes, first)
        if self.content[first] == "|" and not self._separates(first):
            separators += 1  # escaped in the whole by a backslash before the piece: not in it
        columns = separators + 1
        if self.content[first] == "|":
            columns -= 1  # the empty cell before a leading "|" is no column
        if self.content[last - 1] == "|" and (last - 1 == first or self._separates(last - 1)):
            columns -= 1  # nor the one after a trailing "|"
        return columns

    def _separates(self, at: int) -> bool:
        found = bisect_left(self.pipes, at)
        return found < len(self.pipes) and self.pipes[found] == at

    def _end(self, line: int) -> int:
        return self.starts[line + 1] - 1 if line + 1 < len(self.starts) else len(self.content)


def _delimiter_columns(row: str) -> int | None:
    """The columns of a delimiter row, as markdown-it's table rule reads the line under a
    header; None where it reads none."""
    if _indent(row) >= 4:
        return None  # indented code
    row = row.lstrip(" \t")
    if len(row) < 2 or row[0] not in "|-:" or row[1] not in "|-: \t" or row[0] == "-" and row[1] in " \t":
        return None
    if not _ROW_CHARS.fullmatch(row):
        return None
    cells = row.split("|")
    columns = 0
    for n, cell in enumerate(cells):
        cell = cell.strip(" \t")
        if not cell:
            if n in (0, len(cells) - 1):
                continue
            return None
        if not _ALIGN.fullmatch(cell):
            return None
        columns += 1
    return columns or None


def _indent(line: str) -> int:
    """The columns of white space `line` begins with (a tab to the next multiple of 4)."""
    columns = 0
    for char in line:
        if char == " ":
            columns += 1
        elif char == "\t":
            columns += 4 - columns % 4
        else:
            break
    return columns
