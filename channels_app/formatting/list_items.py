"""List items as the source writes them and as a part that goes on in them writes them: a
list item's marker, its column in its line and how far after it its text begins, an
ordered item's number where it is written; the lines of the items (and quotes) a part goes
on in, each marked as continued ("1. …", "   > " at the column of the item's text).
channels_app.formatting.layout reads them while it reads the text."""
from __future__ import annotations

import re

from markdown_it.token import Token

# A list item's marker at the start of its line, after the markers of what it is inside.
LINE_MARKER = re.compile(r"[ \t]*(?:>|[-+*](?=[ \t]|$)|(\d{1,9})[.)](?=[ \t]|$))")


def _line_end(text: str, starts: list[int], line: int) -> int:
    return starts[line + 1] - 1 if line + 1 < len(starts) else len(text)


def item_marker(item: Token, lists: list[tuple[Token, list[Token]]]) -> str:
    """How a list item is marked: its bullet, or its number in its list."""
    if not lists:
        return ""
    opened, items = lists[-1]
    if opened.type == "bullet_list_open":
        return item.markup
    return f"{int(str(opened.attrs.get('start', 1))) + len(items)}{item.markup}"


def item_column(text: str, starts: list[int], item: Token, tokens: list[Token]) -> tuple[int, int]:
    """The column a list item's marker is at in its line, after the quotes' markers (a tab
    to the next multiple of four, as CommonMark reads it), and how many columns after
    the marker its text begins: the spaces written there, one where they are more than
    four (its text is indented code), a tab or none (a first line blank)."""
    if not item.map:
        return 0, 1
    line = item.map[0]
    here = [t for t in tokens if t.type == "list_item_open" and t.map and t.map[0] == line]
    rank = sorted(here, key=lambda t: t.level).index(item)
    start, end = starts[line], _line_end(text, starts, line)
    at, quoted = start, start
    while (found := LINE_MARKER.match(text, at, end)) and found.end() > at:
        if found.group().strip().startswith(">"):
            quoted = found.end() + (text[found.end():found.end() + 1] == " ")
        elif rank:
            rank -= 1
        else:
            marker = found.start() + len(found.group()) - len(found.group().lstrip())
            after = text[found.end():end]
            rest = after.lstrip(" ")
            gap = len(after) - len(rest)
            gap = gap if 1 <= gap <= 4 and rest.strip() and not rest.startswith("\t") else 1
            return len(text[start:marker].expandtabs(4)) - len(text[start:quoted].expandtabs(4)), gap
        at = found.end()
    return 0, 1


def ordered_marker(text: str, starts: list[int], item: Token, tokens: list[Token]) -> tuple[int, str] | None:
    """Where an ordered item's number is written in the source, and the number."""
    if not item.map:
        return None
    line = item.map[0]
    # The items begun on this line, outermost first: one marker each, in that order.
    here = [t for t in tokens if t.type == "list_item_open" and t.map and t.map[0] == line]
    rank = sorted(here, key=lambda t: t.level).index(item)
    start, end = starts[line], _line_end(text, starts, line)
    markers = []
    at = start
    while (found := LINE_MARKER.match(text, at, end)) and found.end() > at:
        if not found.group().strip().startswith(">"):
            markers.append(found)
        at = found.end()
    if rank >= len(markers) or markers[rank].group(1) is None:
        return None
    return markers[rank].start(1), markers[rank].group(1)


def chain(items: list[tuple[str, str]]) -> str:
    """Lines of list items (each after what begins a line in the quotes it is in) one inside
    the next, each marked as continued; a blank line before an item numbered other than 1,
    which could not interrupt the "…" before it (CommonMark) and would go on as its text."""
    lines = []
    for n, (quoted, item) in enumerate(items):
        number = re.match(r"[ \t]*(\d{1,9})[.)]", item)
        if n and number and int(number.group(1)) != 1:
            lines.append(quoted)
        lines.append(f"{quoted}{item} …")
    return "\n".join(lines)


def innermost_quote(within: list[str]) -> int:
    """Where what is in the innermost of `within`'s quotes begins (0: in none)."""
    return len(within) - within[::-1].index("") if "" in within else 0


def continued(within: list[str], *, last: bool = False) -> tuple[str, str]:
    """For quotes ("") and list items (their markers at their columns) `within` one another,
    outermost first: the lines of the items before the last quote (or, `last`, of them
    all), each continued, and what begins a line in their quotes — each quote's marker at
    the column of the text of the item it is in ("1. …" then "   > "), as a part that goes
    on in them writes them."""
    lines: list[str] = []
    quoted, column = "", 0
    run: list[tuple[str, str]] = []  # the items since the last quote, chained alike
    for mark in within:
        if not mark:
            if run:
                lines.append(chain(run))
            quoted, column, run = quoted + " " * column + "> ", 0, []
            continue
        run.append((quoted, mark))
        column = len(mark) + 1
    if run and last:
        lines.append(chain(run))
    return "".join(f"{line}\n" for line in lines), quoted
