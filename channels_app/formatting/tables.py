"""A table row wider than a part, written as its cells.

A row is one line: cut over parts, its pieces are no rows (the next part does not begin
with a `|`), and each shows its cells' text between literal "|"s. Before the reply is cut,
such a row becomes a paragraph of its cells, each on a line after its column's header
("price: 3.50 €") — text cut as any paragraph is — and the rows before and after it stay a
table each, under the header written again (a header with no rows left is left out: the
cells' lines name its columns). A table in a quote or a list item is unfolded in it: each
line written after the markers its lines begin with (the quote's ">", the item's indent),
the first after its own (the item's marker, when the table begins the item).
"""
from __future__ import annotations

import re
from collections.abc import Callable

from markdown_it.token import Token


# What a table's first line begins with before the table: quotes' markers, list items' markers, indent.
_FIRST = re.compile(r"(?:[ \t]*>|[ \t]*(?:[-+*]|\d{1,9}[.)])(?=[ \t]))*[ \t]*")
_REST = re.compile(r"[ \t>]*")  # and its other lines (no list item begins on them)


def unfold_wide_rows(text: str, tokens: list[Token], too_wide: Callable[[str], bool]) -> str:
    """`text` with each row of a table that `too_wide` says of (given the table's header,
    rule and that row) written as its cells; `tokens`: `text` parsed."""
    lines = text.split("\n")
    edits: list[tuple[int, int, str]] = []  # (first line, line after the last, what replaces them)
    for at, token in enumerate(tokens):
        if token.type != "table_open" or not token.map or token.map[1] > len(lines):
            continue
        header, rows = _cells(tokens, at)
        first, end = token.map
        top = "\n".join(lines[first:first + 2])
        wide = {line for line, _ in rows if too_wide(f"{top}\n{lines[line]}")}
        if not wide:
            continue
        first_marks = _FIRST.match(lines[first]).group()  # type: ignore[union-attr]
        marks = _REST.match(lines[first + 1]).group()  # type: ignore[union-attr]
        again = marks + lines[first][len(first_marks):] + "\n" + lines[first + 1]  # the header under the first
        blocks: list[str] = []
        narrow: list[str] = []
        for line, cells in rows:
            if line not in wide:
                narrow.append(lines[line])
                continue
            if narrow:
                blocks.append("\n".join([again if blocks else top, *narrow]))
                narrow = []
            blocks.append("\n".join(f"{marks}{name}: {cell}" if name else f"{marks}{cell}"
                                    for name, cell in zip(header, cells, strict=False) if cell))
        if narrow:
            blocks.append("\n".join([again if blocks else top, *narrow]))
        written = f"\n{marks.rstrip()}\n".join(block for block in blocks if block)
        edits.append((first, end, first_marks + written[len(marks):] if written.startswith(marks) else written))
    for first, end, written in reversed(edits):
        lines[first:end] = [written]
    return "\n".join(lines)


def _cells(tokens: list[Token], at: int) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header's cells of the table opened at `at`, and each row's (its line, its cells),
    as Markdown."""
    header: list[str] = []
    rows: list[tuple[int, list[str]]] = []
    cells = header
    opened = tokens[at].map
    table_line = opened[0] if opened else None
    for token in tokens[at + 1:]:
        if token.type == "table_close":
            break
        if token.type == "tr_open" and token.map and table_line is not None and token.map[0] > table_line:
            cells = []  # a row of the body: the header is the table's first line
            rows.append((token.map[0], cells))
        elif token.type == "inline":
            cells.append(token.content.strip())
    return header, rows
