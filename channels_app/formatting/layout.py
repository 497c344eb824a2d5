"""What the model's Markdown is made of, and where each piece of it is in the text, for
cutting it into parts (channels_app.formatting.seams). Read once from the parser itself
(channels_app.formatting.located, whose inline rules note the offsets they consumed): the
regions a cut may fall inside only if it mends them, or never (spans, links, a heading,
code blocks in quotes and list items, a table's header and first row); each block's
inline text, with where each of its lines is in the source and the quotes and list items
it is in; the ordered lists' numbers, and the items written wider where a part goes on
with them (their markers and columns read by channels_app.formatting.list_items);
top-level code blocks, indented code and tables. Then, for an offset, which of them it
falls in."""
from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any, NamedTuple

from markdown_it.token import Token

from .list_items import (
    LINE_MARKER,
    chain,
    continued,
    innermost_quote,
    item_column,
    item_marker,
    ordered_marker,
)
from .located import located
from .regions import Region, Regions

# A list item's marker in what a line of a quote or a list item begins with.
_ITEM_MARK = re.compile(r"[-+*]|\d{1,9}[.)]")


class Segment(NamedTuple):
    """One line of a block's inline text: where it is in the inline text and in the source."""

    inline: int
    source: int
    length: int


class Inline(NamedTuple):
    content: str
    segments: list[Segment]
    quotes: int  # the blockquotes it is in
    items: tuple[str, ...]  # the list item it is the text of and those it is in, outermost first, each
    # as its marker at its column ("-", "  3."); none when it is not an item's text
    # (within its innermost quote: the items that quote is in are in `lead`)
    lead: str = ""  # the lines of the list items its innermost quote is in, each continued ("1. …\n")
    quoted: str = ""  # what begins a line of it in its quotes ("> > "; "   > " in an item's "1. …")
    within: tuple[str, ...] = ()  # the quotes ("") and list items (as `items`) it is in, outermost first


class Fence(NamedTuple):
    """A code block in a quote or a list item, which a cut between its lines (or inside one
    longer than a part) closes and opens again, in what it is in."""

    low: int  # where its first line of code begins: a cut strictly between low and high is in it
    high: int  # where its closing fence's line begins (where its last line ends, unclosed)
    opening: str  # what begins the next piece: the items it is in, continued, then its fence line
    closing: str  # its closing fence, at its column
    indent: str  # what a line of it begins with (its quotes' markers, its items' indent)


class MarkdownLayout:
    """The Markdown `text`, read (the module's docstring); `env`, the whole reply's link
    references."""

    def __init__(self, text: str, env: dict[str, Any] | None = None) -> None:
        self.text = text
        self.starts = [0, *(m.end() for m in re.finditer("\n", text))]
        self.regions: list[Region] = []
        self.inlines: list[Inline] = []
        self.numbers: list[tuple[int, int, str, int]] = []  # (marker offset, item's line, written, number)
        self.firsts: dict[int, int] = {}  # marker offset -> offset of the item before it in its list
        # Ordered items written wider than in the text where a part goes on with them ("1." as "11."):
        # (marker offset, first line, line after the last, the columns more their lines need).
        self.widened: list[tuple[int, int, int, int]] = []
        self.code_lines: list[tuple[int, int, int]] = []  # indented code blocks' lines, and the quotes they are in
        self.tables: list[tuple[int, int, str]] = []  # (where its rows begin, where they end, its header and rule)
        self.code: list[tuple[int, int]] = []  # top-level code blocks' lines (first, after the last)
        self.fences: list[Fence] = []  # code blocks in a quote or a list item
        # Where the opening fence line of one of them begins -> the quotes and items it is in (as Inline's `within`).
        self._fenced: dict[int, tuple[str, ...]] = {}
        self._shorter: dict[Region, str] = {}  # inline code over lines: what its later pieces open it with
        self._cursor: dict[int, int] = {}
        self.env = dict(env or {})
        self._blocks(located().parse(text, dict(self.env)))
        self.index = Regions(text, self.regions)
        # The inline texts by where they begin, with where each of their lines ends (an
        # empty one holds no offset).
        self._placed = sorted((inline for inline in self.inlines if inline.content), key=lambda i: i.segments[0].source)
        self._firsts = [inline.segments[0].source for inline in self._placed]
        self._ends = [[s.source + s.length for s in inline.segments] for inline in self._placed]

    def _blocks(self, tokens: list[Token]) -> None:
        lists: list[tuple[Token, list[Token]]] = []
        quotes = 0
        within: list[str] = []  # the quotes ("") and list items (their markers at their columns), innermost last
        wider: list[int] = []  # for each of `within`, how many columns wider its marker is written
        for i, token in enumerate(tokens):
            if token.type in ("blockquote_open", "list_item_open"):
                marker = "" if token.type == "blockquote_open" else item_marker(token, lists)
                # An item in items written wider is written as many columns further in.
                outer = sum(wider[len(within) - within[::-1].index(""):] if "" in within else wider)
                if token.type == "blockquote_open":
                    within.append("")
                else:  # at its column, with the spaces before its text: a part writes it so continued
                    column, gap = item_column(self.text, self.starts, token, tokens)
                    within.append(" " * (column + outer) + marker + " " * (gap - 1))
                wider.append(max(0, len(marker) - len(token.info + token.markup)) if token.info else 0)
            elif token.type in ("blockquote_close", "list_item_close") and within:
                within.pop()
                wider.pop()
            if token.type in ("blockquote_open", "blockquote_close"):
                quotes += token.nesting
            elif token.type == "inline" and token.map:
                heading = tokens[i - 1] if i and tokens[i - 1].type == "heading_open" else None
                # An item's text: the items it is in within its innermost quote, outermost first.
                items = () if not within or not within[-1] or heading is not None else tuple(
                    within[len(within) - within[::-1].index(""):] if "" in within else within)
                self._inline(token, heading, quotes, items, within)
            elif token.type in ("ordered_list_open", "bullet_list_open"):
                lists.append((token, []))
            elif token.type in ("ordered_list_close", "bullet_list_close"):
                opened, its_items = lists.pop()
                if opened.type == "ordered_list_open":
                    self._ordered(opened, its_items, tokens)
            elif token.type == "list_item_open" and lists:
                lists[-1][1].append(token)
            elif token.type == "code_block" and token.map:
                self.code_lines.append((token.map[0], token.map[1], quotes))
            elif token.type == "fence" and token.map and token.level == 0:
                self.code.append((token.map[0], token.map[1]))
            elif token.type == "fence" and token.map and token.map[1] - token.map[0] > 1:
                self.regions.append(Region(self.starts[token.map[0]], self._line_end(token.map[1] - 1), None, ""))
                items = () if not within or not within[-1] else tuple(
                    within[len(within) - within[::-1].index(""):] if "" in within else within)
                self._fence(token, items, *continued(within[:innermost_quote(within)]))
                self._fenced[self.starts[token.map[0]]] = tuple(within)
            elif token.type == "table_open" and token.map:  # never between its header, its rule and its first row
                self.regions.append(Region(self.starts[token.map[0]],
                                            self._line_end(min(token.map[0] + 2, token.map[1] - 1)), None, ""))
                if token.map[0] + 2 < len(self.starts):  # a piece of its rows: the header again
                    body = self.starts[token.map[0] + 2]
                    self.tables.append((body, self._line_end(token.map[1] - 1), self.text[self.starts[token.map[0]]:body]))

    def _fence(self, token: Token, items: tuple[str, ...], lead: str, quoted: str) -> None:
        """Note a code block in a quote or a list item: how a piece of it is closed and the
        next opened, in the quotes and items it is in (`items`, within its innermost quote;
        `lead` and `quoted` as Inline's)."""
        assert token.map is not None
        first, end = token.map
        line = self.text[self.starts[first]:self._line_end(first)]
        column = line.find(token.markup)
        if column < 0:
            return
        # Its lines' markers: the quotes' kept, an item's marker (on the fence's own line) as spaces.
        indent = _ITEM_MARK.sub(lambda m: " " * len(m.group()), line[:column])
        last = self.text[self.starts[end - 1]:self._line_end(end - 1)]
        run = last[len(last) - len(last.lstrip(" \t>")):]
        closed = run.startswith(token.markup) and not run.strip().strip(token.markup[0])
        within = lead + (chain([(quoted, item) for item in items]) + "\n" if items else "")
        self.fences.append(Fence(self.starts[first + 1], self.starts[end - 1] if closed else self._line_end(end - 1),
                                  f"{within}{indent}{line[column:]}\n", f"\n{indent}{token.markup}", indent))

    def blocks(self) -> list[tuple[str, str]]:
        """The top-level code blocks (as markdown-it reads them: not a fence's line in an
        indented code block) and the prose between them."""
        out: list[tuple[str, str]] = []
        at = 0
        for first, end in self.code:
            low = self.starts[first]
            high = self.starts[end] if end < len(self.starts) else len(self.text)
            if low > at:
                out.append(("prose", self.text[at:low]))
            out.append(("code", self.text[low:high]))
            at = high
        if at < len(self.text):
            out.append(("prose", self.text[at:]))
        return out

    def _line_end(self, line: int) -> int:
        return self.starts[line + 1] - 1 if line + 1 < len(self.starts) else len(self.text)

    def _inline(self, token: Token, heading: Token | None, quotes: int, items: tuple[str, ...],
                within: list[str]) -> None:
        segments = self._segments(token)
        if segments is None:  # not found as written (a tab the parser expanded): cut as prose
            return
        inline = Inline(token.content, segments, quotes, items,
                        *continued(within[:innermost_quote(within)]), tuple(within))
        self.inlines.append(inline)
        at = partial_source(segments)
        if heading is not None and heading.markup.startswith("#"):
            self.regions.append(Region(at(0), at(len(token.content)), "", heading.markup + " "))
        opened: list[Token] = []
        for child in token.children or []:
            where = child.meta.get("at")
            if child.type in ("strong_open", "em_open", "s_open"):
                opened.append(child)
            elif child.type in ("strong_close", "em_close", "s_close") and opened:
                start = opened.pop()
                if "at" in start.meta and where is not None:  # strong's is at the second of its two
                    low = start.meta["at"] - len(start.markup) + (1 if start.type == "strong_open" else len(start.markup))
                    self.regions.append(Region(at(low), at(where), child.markup, start.markup))
            elif child.type == "code_inline" and "span" in child.meta:
                low, high = child.meta["span"]
                # Over its closing backticks: a cut after a space just before them (`` `a ` ``) is
                # inside, with nothing of the code after it, and so is not taken.
                region = Region(at(low + len(child.markup)), at(high), child.markup, child.markup)
                self.regions.append(region)
                code = token.content[low + len(child.markup):high - len(child.markup)]
                # Opened again at a part's start, three backticks or more would open a code
                # block: the pieces after the first are written between a run its code has not.
                # A line of it begun with a backtick would run into the run opened before it: a
                # space between (CommonMark takes one off each end of code between spaces).
                ticked = re.search(r"\n[ \t]*`", code)
                if "\n" in code and (len(child.markup) >= 3 or ticked):
                    runs = {len(run) for run in re.findall(r"`+", code)}
                    shorter = next((n for n in (1, 2) if n not in runs), None) if len(child.markup) >= 3 else len(
                        child.markup)
                    if shorter is not None:
                        self._shorter[region] = "`" * shorter + (" " if ticked else "")
            elif child.type == "link_open" and "label" in child.meta:
                low, label, high = child.meta["label"]
                ending = token.content[label:high]
                if not re.match(r"\]\(|\]\[[^\]]", ending):  # [label] or [label][]: the label is the reference
                    ending = "][" + " ".join(token.content[low + 1:label].split()) + "]"
                self.regions.append(Region(at(low), at(label), ending, "["))
                self.regions.append(Region(at(label) - 1, at(high), None, ""))
            elif child.type in ("image", "link_open") and "span" in child.meta:
                low, high = child.meta["span"]
                self.regions.append(Region(at(low), at(high), None, ""))

    def _segments(self, token: Token) -> list[Segment] | None:
        assert token.map is not None
        segments, inline = [], 0
        for n, line in enumerate(token.content.split("\n")):
            number = token.map[0] + n
            if number >= len(self.starts):
                return None
            source = self.text[self.starts[number]:self._line_end(number)]
            found = source.find(line, self._cursor.get(number, 0))
            if found < 0:
                return None
            self._cursor[number] = found + len(line)
            segments.append(Segment(inline, self.starts[number] + found, len(line)))
            inline += len(line) + 1
        return segments

    def _ordered(self, opened: Token, items: list[Token], tokens: list[Token]) -> None:
        first = int(str(opened.attrs.get("start", 1)))
        previous = None
        for n, item in enumerate(items):
            marker = ordered_marker(self.text, self.starts, item, tokens)
            if marker is not None and n:
                self.numbers.append((marker[0], item.map[0] if item.map else 0, marker[1], first + n))
                if len(str(first + n)) > len(marker[1]) and item.map:
                    self.widened.append((marker[0], item.map[0], item.map[1], len(str(first + n)) - len(marker[1])))
                if previous is not None:
                    self.firsts[marker[0]] = previous
            previous = marker[0] if marker is not None else None

    def _in_fence(self, at: int) -> Fence | None:
        """The code block in a quote or a list item a cut at `at` falls in, with code on both sides."""
        for fence in self.fences:
            if fence.low < at < fence.high:
                if self.text[fence.low:at].strip(" \t\n>") and self.text[at:fence.high].strip(" \t\n>"):
                    return fence
                return None
        return None

    def _closes_fence(self, at: int) -> bool:
        """Whether a cut at `at` inside a line of a code block in a quote or a list item leaves
        either side of that line only its fence's character, as many as close it."""
        fence = self._in_fence(at)
        if fence is None:
            return False
        mark = fence.closing.strip()
        line = bisect_right(self.starts, at) - 1
        for side in (self.text[self.starts[line] + len(fence.indent):at], self.text[at:self._line_end(line)]):
            run = side.strip()
            if len(run) >= len(mark) and run == mark[0] * len(run):
                return True
        return False

    def _place(self, at: int) -> tuple[Inline, int] | None:
        """The inline text a cut at `at` is in, and where in it the next piece begins."""
        found = bisect_left(self._firsts, at) - 1  # the last inline begun before `at`
        if found < 0:
            return None
        inline, ends = self._placed[found], self._ends[found]
        if at > ends[-1]:
            return None
        segment = inline.segments[bisect_left(ends, at)]  # the first line of it ending at or after `at`
        return inline, segment.inline + max(0, at - segment.source)

    def _line_text(self, at: int) -> int:
        """Where the text of the line `at` is on begins: after the markers of the quotes and
        list items it is in ("1. __ __" is an item whose text, alone, reads as a rule)."""
        place = self._place(at)
        line_start = self.starts[bisect_right(self.starts, at) - 1]
        if place is None:
            return line_start
        inline, offset = place
        segment = inline.segments[bisect_right([s.inline for s in inline.segments], offset) - 1]
        return max(line_start, segment.source)

    def _nested(self, at: int) -> tuple[str, str | None]:
        """For a line begun at `at` whose text (or code block) is in list items (or in a quote in one): the
        lines of the items it goes on under, outermost first, each marked as continued — not
        those the line begins with their markers ("1. - alpha" begins the item and the one
        nested in it; "1. > note", the item the quote is in) — and what begins a blank line
        after them when the last is an item (else None)."""
        within = self._fenced.get(at)  # a code block's opening fence line: what it is in
        if within is None:
            found = bisect_left(self._firsts, at)
            if found == len(self._firsts) or self._firsts[found] >= self._line_end(bisect_right(self.starts, at) - 1):
                return "", None
            within = self._placed[found].within
        # The items the line itself begins, one marker each, are the innermost of those it is in.
        begun, end = 0, self._line_end(bisect_right(self.starts, at) - 1)
        while (marker := LINE_MARKER.match(self.text, at, end)) and marker.end() > at:
            begun += not marker.group().strip().startswith(">")
            at = marker.end()
        items = [n for n, mark in enumerate(within) if mark]
        kept = within[:items[-begun]] if 0 < begun <= len(items) else within if not begun else ()
        lines, quoted = continued(list(kept), last=True)
        return lines, quoted if kept and kept[-1] else None

    def _indented_code(self, at: int) -> bool:
        line = bisect_right(self.starts, at) - 1
        return any(low <= line < high for low, high, _ in self.code_lines)

    def code_indent(self, at: int) -> str:
        """What the line of indented code `at` is in begins with before its code: its quotes'
        markers and four columns (a ">" after them is code)."""
        line = bisect_right(self.starts, at) - 1
        quotes = next((q for low, high, q in self.code_lines if low <= line < high), 0)
        text = self.text[self.starts[line]:at]
        markers = re.match(r"(?:[ \t]*>[ \t]?){%d}" % quotes, text)
        begins = markers.end() if markers else 0
        rest = text[begins:]
        return text[:begins] + rest[:len(rest) - len(rest.lstrip(" \t"))][:4]

    def _ink_before(self, at: int) -> int:
        """Where the text before `at` ends, its white space left out."""
        while at > 0 and self.text[at - 1].isspace():
            at -= 1
        return at


def partial_source(segments: list[Segment]) -> Callable[[int], int]:
    """Offsets in a block's inline text to offsets in the source."""
    return lambda offset: source_offset(segments, offset)


def source_offset(segments: list[Segment], offset: int) -> int:
    """The source offset of an offset in a block's inline text."""
    for segment in reversed(segments):
        if offset >= segment.inline:
            return segment.source + min(offset - segment.inline, segment.length)
    return segments[0].source
