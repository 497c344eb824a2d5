"""Where the model's Markdown may be cut when a block is longer than a part, and how each
piece is made whole (channels_app.split.Seams), so every part reads as the whole did.

A cut falls after a line break or a space, preferably outside every formatted span. One
inside `**…**`, `*…*`, `~~…~~`, `` `…` `` or a link's label closes them at the end of the
piece and opens them again at the start of the next (`[label](url)` ending the piece with
its address, the next beginning with `[`); a heading's cut opens the next piece with the
heading's marker, a quote's with the quote's. Such a cut is taken only once both sides,
read again, show what the text did. Nothing is cut inside a link's address, an image or an
autolink, nor where the next piece would begin with what Markdown reads as a block (a `- `
that was a dash in a sentence). An ordered list split over pieces goes on with its numbers:
the first of its items in a piece is written with the number it had (CommonMark numbers a
list from its first item's), so "1." written on every item still reads 1, 2, 3… over the
parts.

Where a span begins and ends in the text is read from the parser itself: the inline rules
that make spans are wrapped to note the offsets they consumed.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from functools import cache
from typing import Any, NamedTuple

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

from ..split import Seam
from .render import parser

# What the start of a line reads as a block, were a cut to put it there.
_BLOCK_START = re.compile(r"[ \t]{0,3}(?:#{1,6}(?:[ \t]|$)|>|[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|`{3}|~{3}|=+[ \t]*$"
                          r"|(?:[-*_][ \t]*){3,}$)")
# A list item's marker at the start of its line, after the markers of what it is inside.
_MARKER = re.compile(r"[ \t]*(?:>|[-+*](?=[ \t]|$)|(\d{1,9})[.)](?=[ \t]|$))")
# What the start of a line, cut from the rest of it, reads as where the whole line did not.
_LINE_ALONE = re.compile(r"[ \t]{0,3}(?:(?:`{3,}|~{3,}).*|(?:[-*_][ \t]*){3,}|=+|-+)")
_RUNS = "*_~`"
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
CLEAN_LINE, CLEAN_SPACE, MENDED_LINE, MENDED_SPACE = range(4)


class _Region(NamedTuple):
    low: int  # a cut strictly between low and high is inside
    high: int
    closing: str | None  # None: never cut inside
    opening: str


class _Segment(NamedTuple):
    """One line of a block's inline text: where it is in the inline text and in the source."""

    inline: int
    source: int
    length: int


class _Inline(NamedTuple):
    content: str
    segments: list[_Segment]
    quotes: int  # the blockquotes it is in


class MarkdownSeams:
    """channels_app.split.Seams for the model's Markdown `text`; `env`, the whole reply's
    link references."""

    def __init__(self, text: str, env: dict[str, Any] | None = None) -> None:
        self.text = text
        self.starts = [0, *(m.end() for m in re.finditer("\n", text))]
        self.regions: list[_Region] = []
        self.inlines: list[_Inline] = []
        self.numbers: list[tuple[int, int, str, int]] = []  # (marker offset, item's line, written, number)
        self.firsts: dict[int, int] = {}  # marker offset -> offset of the item before it in its list
        self.code_lines: list[tuple[int, int]] = []  # indented code blocks' lines
        self._cursor: dict[int, int] = {}
        self.env = dict(env or {})
        self._read: dict[str, list[tuple[str, frozenset[str]]]] = {}
        self._blocks(_located().parse(text, dict(self.env)))

    # --- reading the parse ---
    def _blocks(self, tokens: list[Token]) -> None:
        lists: list[tuple[Token, list[Token]]] = []
        quotes = 0
        for i, token in enumerate(tokens):
            if token.type in ("blockquote_open", "blockquote_close"):
                quotes += token.nesting
            elif token.type == "inline" and token.map:
                heading = tokens[i - 1] if i and tokens[i - 1].type == "heading_open" else None
                self._inline(token, heading, quotes)
            elif token.type in ("ordered_list_open", "bullet_list_open"):
                lists.append((token, []))
            elif token.type in ("ordered_list_close", "bullet_list_close"):
                opened, items = lists.pop()
                if opened.type == "ordered_list_open":
                    self._ordered(opened, items, tokens)
            elif token.type == "list_item_open" and lists:
                lists[-1][1].append(token)
            elif token.type == "code_block" and token.map:
                self.code_lines.append((token.map[0], token.map[1]))
            elif token.type == "fence" and token.map and token.map[1] - token.map[0] > 1:
                self.regions.append(_Region(self.starts[token.map[0]], self._line_end(token.map[1] - 1), None, ""))
            elif token.type == "table_open" and token.map:  # never between a table's header and its rule
                self.regions.append(_Region(self.starts[token.map[0]], self._line_end(token.map[0] + 1), None, ""))

    def _line_end(self, line: int) -> int:
        return self.starts[line + 1] - 1 if line + 1 < len(self.starts) else len(self.text)

    def _inline(self, token: Token, heading: Token | None, quotes: int) -> None:
        segments = self._segments(token)
        if segments is None:  # not found as written (a tab the parser expanded): cut as prose
            return
        inline = _Inline(token.content, segments, quotes)
        self.inlines.append(inline)
        at = partial_source(segments)
        if heading is not None and heading.markup.startswith("#"):
            self.regions.append(_Region(at(0), at(len(token.content)), "", heading.markup + " "))
        opened: list[Token] = []
        for child in token.children or []:
            where = child.meta.get("at")
            if child.type in ("strong_open", "em_open", "s_open"):
                opened.append(child)
            elif child.type in ("strong_close", "em_close", "s_close") and opened:
                start = opened.pop()
                if "at" in start.meta and where is not None:  # strong's is at the second of its two
                    low = start.meta["at"] - len(start.markup) + (1 if start.type == "strong_open" else len(start.markup))
                    self.regions.append(_Region(at(low), at(where), child.markup, start.markup))
            elif child.type == "code_inline" and "span" in child.meta:
                low, high = child.meta["span"]
                ticks = len(child.markup)
                self.regions.append(_Region(at(low + ticks), at(high - ticks), child.markup, child.markup))
            elif child.type == "link_open" and "label" in child.meta:
                low, label, high = child.meta["label"]
                ending = token.content[label:high]
                if not re.match(r"\]\(|\]\[[^\]]", ending):  # [label] or [label][]: the label is the reference
                    ending = "][" + " ".join(token.content[low + 1:label].split()) + "]"
                self.regions.append(_Region(at(low), at(label), ending, "["))
                self.regions.append(_Region(at(label) - 1, at(high), None, ""))
            elif child.type in ("image", "link_open") and "span" in child.meta:
                low, high = child.meta["span"]
                self.regions.append(_Region(at(low), at(high), None, ""))

    def _segments(self, token: Token) -> list[_Segment] | None:
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
            segments.append(_Segment(inline, self.starts[number] + found, len(line)))
            inline += len(line) + 1
        return segments

    def _ordered(self, opened: Token, items: list[Token], tokens: list[Token]) -> None:
        first = int(str(opened.attrs.get("start", 1)))
        previous = None
        for n, item in enumerate(items):
            marker = self._marker(item, tokens)
            if marker is not None and n:
                self.numbers.append((marker[0], item.map[0] if item.map else 0, marker[1], first + n))
                if previous is not None:
                    self.firsts[marker[0]] = previous
            previous = marker[0] if marker is not None else None

    def _marker(self, item: Token, tokens: list[Token]) -> tuple[int, str] | None:
        """Where an ordered item's number is written in the source, and the number."""
        if not item.map:
            return None
        line = item.map[0]
        # The items begun on this line, outermost first: one marker each, in that order.
        here = [t for t in tokens if t.type == "list_item_open" and t.map and t.map[0] == line]
        rank = sorted(here, key=lambda t: t.level).index(item)
        start, end = self.starts[line], self._line_end(line)
        markers = []
        at = start
        while (found := _MARKER.match(self.text, at, end)) and found.end() > at:
            if not found.group().strip().startswith(">"):
                markers.append(found)
            at = found.end()
        if rank >= len(markers) or markers[rank].group(1) is None:
            return None
        return markers[rank].start(1), markers[rank].group(1)

    # --- channels_app.split.Seams ---
    def cut(self, start: int, hard: int) -> int:
        # In the piece's second half the best kind of cut, the latest of its kind; else the
        # latest there is (a piece cut short to stay clean is a part sent near empty).
        middle = start + (hard - start) // 2
        best = None
        for at in range(min(hard, len(self.text) - 1), start, -1):
            before = self.text[at - 1]
            if before not in " \n" or before == " " and self.text[at].isspace():
                continue  # a cut falls after a line break, or after the last of a run of spaces
            if at <= middle and best is not None:
                break
            rank = self._rank(at)
            if rank is not None and (best is None or rank < best[0]):
                if rank in (MENDED_LINE, MENDED_SPACE) and not self._mends_well(at):
                    continue
                best = (rank, at)
                if rank == CLEAN_LINE or at <= middle:
                    break
        if best is not None:
            return best[1]
        # No space to cut at: a hard cut, never inside what is not to be cut (a link's
        # address): before it, or when the piece begins with it, after it.
        whole = [r for r in self.regions if r.closing is None and r.low < hard < r.high]
        if not whole:  # nor inside an entity or after a backslash, nor where the next piece begins as a block
            for entity in _ENTITY.finditer(self.text, max(start, hard - 40), min(len(self.text), hard + 40)):
                if entity.start() < hard < entity.end() and entity.start() > start:
                    hard = entity.start()
            while hard > start + 1 and (_BLOCK_START.match(self.text, hard) or self.text[hard - 1] == "\\"
                                        or self.text[hard - 1] in _RUNS and self.text[hard - 1] == self.text[hard]):
                hard -= 1
            for back in range(hard, max(start, hard - 64), -1):  # where both sides read as they did
                if self._cuts_well(back) or self._inside(back) and self._mends_well(back):
                    return back
            return hard
        low, high = min(r.low for r in whole), max(r.high for r in whole)
        while around := [r for r in self.regions if r.opening == "[" and r.low < low < r.high]:  # the link, not its label
            low = min(r.low for r in around)
        if low > start and (self.text[low - 1] == "\n" or self._place(low) is not None):
            return low
        return high

    def _inside(self, at: int) -> list[_Region] | None:
        """The regions a cut at `at` is inside, outermost first; None where it may not be."""
        inside = []
        for region in self.regions:
            if region.low < at < region.high:
                if region.closing is None or not self.text[region.low:at].strip() or \
                        not self.text[at:region.high].strip():
                    return None
                inside.append(region)
        return sorted(inside, key=lambda r: (r.low, -r.high))

    def _rank(self, at: int) -> int | None:
        inside = self._inside(at)
        if inside is None:
            return None
        place = self._place(at)
        line = self.text[at - 1] == "\n"
        if place is None and not line:
            return None  # after a list's marker, a heading's, between a table's cells
        if not line and _LINE_ALONE.fullmatch(self.text[self.starts[bisect_right(self.starts, at) - 1]:at].rstrip()):
            return None  # the line's start, alone, would read as a fence or a rule
        if place is not None and not inside and _BLOCK_START.match(place[0].content, place[1]):
            return None
        if inside:
            closes = any(r.closing for r in inside)
            opens = any(r.opening and not r.opening.endswith(" ") for r in inside)
            if closes and self.text[:at].rstrip()[-1:] in _RUNS or opens and self.text[at] in _RUNS:
                return None  # a marker written beside another would make one run of both, read otherwise
            return MENDED_LINE if line else MENDED_SPACE
        if line and place is None and re.match(r" {4}", self.text[at:at + 4]) and not self._indented_code(at):
            return MENDED_LINE  # an indented line would read as code: it loses its indent
        return CLEAN_LINE if line else CLEAN_SPACE

    def _mends_well(self, at: int) -> bool:
        """Whether the text before a cut at `at` with its spans closed, and the text after it
        with them opened, read as the text did: a marker written next to one of the text's
        own (`2*3*`) may pair with it instead."""
        place, inside = self._place(at), self._inside(at) or []
        if place is None:
            return False
        inline, offset = place
        spans = [r for r in inside if not r.opening.endswith(" ")]
        if not spans:
            return True
        before = inline.content[:offset].rstrip()
        before += _closed(before, "".join(r.closing or "" for r in reversed(spans)))
        after = "".join(r.opening for r in spans) + inline.content[offset:].lstrip()
        return self._reads(before) + self._reads(after) == self._reads(inline.content)

    def _cuts_well(self, at: int) -> bool:
        """Whether the text on each side of a cut at `at` (in no span) reads as it did
        whole: a marker the whole left as text (`**` with nothing to close it) may pair in a
        piece with one the whole paired elsewhere."""
        place = self._place(at)
        if place is None or self._inside(at):
            return place is None and not self._inside(at)
        inline, offset = place
        return self._reads(inline.content[:offset]) + self._reads(inline.content[offset:]) == \
            self._reads(inline.content)

    def _reads(self, inline: str) -> list[tuple[str, frozenset[str]]]:
        """What an inline text shows: each character (white space left out) with its formatting."""
        if inline not in self._read:
            shown: list[tuple[str, frozenset[str]]] = []
            stack: list[str] = []
            for token in parser().parseInline(inline, dict(self.env))[0].children or []:
                if token.nesting == 1:
                    stack.append(f"{token.type} {token.attrs.get('href', '')}")
                elif token.nesting == -1 and stack:
                    stack.pop()
                elif token.type in ("text", "code_inline", "image"):
                    kind = frozenset([*stack, token.type])
                    shown.extend((char, kind) for char in token.content if not char.isspace())
            self._read[inline] = shown
        return self._read[inline]

    def _indented_code(self, at: int) -> bool:
        line = bisect_right(self.starts, at) - 1
        return any(low <= line < high for low, high in self.code_lines)

    def _place(self, at: int) -> tuple[_Inline, int] | None:
        """The inline text a cut at `at` is in, and where in it the next piece begins."""
        for inline in self.inlines:
            first, last = inline.segments[0], inline.segments[-1]
            if not first.source < at <= last.source + last.length:
                continue
            for previous, segment in zip([None, *inline.segments], inline.segments, strict=False):
                if at <= segment.source + segment.length and (previous is None or
                                                             at > previous.source + previous.length):
                    return inline, segment.inline + max(0, at - segment.source)
        return None

    def mend(self, at: int) -> Seam:
        inside = self._inside(at) or []
        resume, quoted = at, ""
        place = self._place(at)
        if place is not None:  # in a paragraph: the next piece begins at its text, in its quotes
            inline, offset = place
            resume = at if self.text[at - 1] == " " else _source(inline.segments, offset)
            quoted = "> " * inline.quotes
        elif self.text[at - 1] == "\n" and re.match(r" {4}", self.text[at:at + 4]) and not self._indented_code(at):
            resume = at + len(self.text[at:]) - len(self.text[at:].lstrip(" "))
        closing = "".join(r.closing or "" for r in reversed(inside))
        return Seam(_closed(self.text[:at].rstrip(), closing), quoted + "".join(r.opening for r in inside), resume)

    def take(self, start: int, end: int, since: int) -> str:
        """The text, the first of an ordered list's items in the piece written with its number."""
        out, at = [], start
        for marker, line, written, number in self.numbers:
            if not start <= marker < end or self.firsts.get(marker, -1) >= since or str(number) == written:
                continue
            begins = self.starts[line]
            if at <= begins and begins > since and self.text[self.starts[line - 1]:begins].strip():
                # a list not begun at 1 cannot interrupt a paragraph: a blank line ends it first
                out.append(self.text[at:begins] + "\n")
                at = begins
            out.append(self.text[at:marker] + str(number))
            at = marker + len(written)
        out.append(self.text[at:end])
        return "".join(out)


def _closed(before: str, closing: str) -> str:
    """What closes a piece ending with `before`: `closing`, after one more backslash when
    `before` ends with one that would escape it."""
    if closing and (len(before) - len(before.rstrip("\\"))) % 2:
        return "\\" + closing
    return closing


def partial_source(segments: list[_Segment]) -> Callable[[int], int]:
    """Offsets in a block's inline text to offsets in the source."""
    return lambda offset: _source(segments, offset)


def _source(segments: list[_Segment], offset: int) -> int:
    """The source offset of an offset in a block's inline text."""
    for segment in reversed(segments):
        if offset >= segment.inline:
            return segment.source + min(offset - segment.inline, segment.length)
    return segments[0].source


# --- the parser that notes where its spans are ---
Rule = Callable[[StateInline, bool], bool]


def _noting(rule: Rule, kind: str) -> Rule:
    def noted(state: StateInline, silent: bool) -> bool:
        if silent:
            return rule(state, silent)
        if state.pending:
            state.pushPending()
        start, count = state.pos, len(state.tokens)
        if not rule(state, silent):
            return False
        new = state.tokens[count:]
        if kind == "delimiters":  # one token a marker (or a pair of tildes), in order
            offset = start
            for token in new:
                token.meta["at"] = offset
                offset += len(token.content)
        elif new:
            new[0].meta["span"] = (start, state.pos)
            if kind == "link" and new[0].type == "link_open":
                end, state.pos = state.pos, start
                label = state.md.helpers.parseLinkLabel(state, start, True)
                state.pos = end
                new[0].meta["label"] = (start, label, end)
        return True

    return noted


@cache
def _located() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    rules = {rule.name: rule.fn for rule in md.inline.ruler.__rules__}
    for name, kind in (("emphasis", "delimiters"), ("strikethrough", "delimiters"), ("link", "link"),
                       ("image", "span"), ("backticks", "span"), ("autolink", "span")):
        md.inline.ruler.at(name, _noting(rules[name], kind))
    return md
