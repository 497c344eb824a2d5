"""Whether a cut at an offset of the model's Markdown leaves both pieces reading as the text
did (channels_app.formatting.seams decides the cuts and mends them): what spans a cut is
inside and whether they may be closed and opened again there, whether the next piece
would begin with what Markdown reads as a block, or this one end with a line that alone
reads as a rule or a fence, and each side of a cut read again
(channels_app.formatting.reading), a paragraph's text read once in segments."""
from __future__ import annotations

import re
from bisect import bisect_right
from typing import Any

from .layout import Inline, MarkdownLayout, source_offset
from .reading import Reading, Segments, read
from .regions import Region
from .table_cuts import TableCuts

# What the start of a line reads as a block, were a cut to put it there (but a rule or a
# heading's underline, the whole rest of the line: LineEnds).
_OPENS_BLOCK = re.compile(r"[ \t]{0,3}(?:#{1,6}(?:[ \t]|$)|>|[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|`{3}|~{3})",
                          re.MULTILINE)  # $: the line's end, a line break after it too
_INDENT = re.compile(r"[ \t]*")
_SPACE = re.compile(r"\s*")  # white space as str.lstrip() reads it
# What the start of a line, cut from the rest of it, reads as where the whole line did not (a
# fence, a rule, a heading's underline; a list item's marker or a heading's, alone, an empty one).
_LINE_ALONE = re.compile(r"[ \t]{0,3}(?:(?:`{3,}|~{3,}).*|(?:[-*_][ \t]*){3,}|=+|-+|[-+*]|\d{1,9}[.)]|#{1,6})")
# A line's start (within quotes and list items) that opens a code block with backticks.
FENCE_CUT = re.compile(r"[ \t]*(?:(?:>|[-+*]|\d{1,9}[.)])[ \t]*)*(`{3,})[^`]*\Z")
# A line that is a rule, whatever its indent (a cut that might make one is left for another).
_RULE = re.compile(r"[ \t]*(?:[-*_][ \t]*){3,}")
_LEADING_MARKER = re.compile(r"[ \t]*(?:>|[-+*]|\d{1,9}[.)])[ \t]*")  # one of a line's quote or item markers
QUOTED = re.compile(r"(?:[ \t]*>[ \t]?)*")  # a line's quotes' markers
RUNS = "*_~`"
# What would open a code block at a line's start, or begin a rule (with only its marker and spaces after).
_FENCE_RUN = re.compile(r"[ \t]{0,3}(```|~~~|[-*_])")
_FENCE_RUNS = re.compile(r"`{3,}|~{3,}")


class LineEnds:
    """Where each line of `text` ends in a rule (three of one of "-", "*", "_" or more, and
    spaces) or a heading's underline ("=" and spaces), read once a line, from its end, when
    first asked: whether the rest of a line from an offset is one costs no reading to the
    line's end, which at each cut tried in a long line ("x " and 64,000 underscores) made
    planning grow with the square of its length."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0, *(m.end() for m in re.finditer("\n", text))]
        self._lines: dict[int, dict[str, tuple[int, int]]] = {}

    def rule_at(self, at: int) -> bool:
        """Whether the line's rest from `at` (after three spaces at most) is a rule or an underline."""
        marker = _INDENT.match(self.text, at, min(len(self.text), at + 4)).end()  # type: ignore[union-attr]
        if marker - at > 3 or self.text[marker:marker + 1] not in ("-", "*", "_", "="):
            return False
        low, high = self._ends(bisect_right(self.starts, marker) - 1)[self.text[marker]]
        return low <= marker <= high

    def _ends(self, line: int) -> dict[str, tuple[int, int]]:
        """For each marker, the offsets of the line from which its rest is a rule (or an
        underline) made of that marker: (first, last), last before first where there are none."""
        if line not in self._lines:
            text, start = self.text, self.starts[line]
            end = self.starts[line + 1] - 1 if line + 1 < len(self.starts) else len(text)
            ends = {}
            for marker in "-*_":  # the line's end of the marker and spaces alone, to its third marker from the end
                first = start + len(text[start:end].rstrip(marker + " \t"))
                third = end
                for _ in range(3):
                    third = text.rfind(marker, first, third) if third >= 0 else -1
                ends[marker] = (first, third)  # -1 where fewer than three
            blank = start + len(text[start:end].rstrip(" \t"))
            ends["="] = (start + len(text[start:blank].rstrip("=")), blank - 1)
            self._lines[line] = ends
        return self._lines[line]


def begins_block(text: str, at: int, ends: LineEnds) -> bool:
    """Whether `text` read from `at` would begin with what Markdown reads as a block, at a
    line's start (`ends`: `text`'s lines' ends)."""
    return bool(_OPENS_BLOCK.match(text, at)) or ends.rule_at(at)


class CutChecks(MarkdownLayout):
    """The checks of a cut in the Markdown `text` (read by MarkdownLayout); `env`, the whole
    reply's link references. The piece being cut begins at `_start`, a part holds `_part`."""

    def __init__(self, text: str, env: dict[str, Any] | None = None) -> None:
        super().__init__(text, env)
        self._start = 0  # where the piece being cut begins
        self._part = len(text)  # how much a part holds
        self._read: dict[str, tuple[Reading, bool]] = {}
        self._readings: dict[str, Segments] = {}
        self._line_ends: dict[str, LineEnds] = {}
        self._tables: dict[str, TableCuts] = {}
        # The text's runs of three backticks or tildes or more: (where each begins, where it ends).
        runs = [(run.start(), run.end()) for run in _FENCE_RUNS.finditer(text)]
        self._run_starts, self._run_ends = [low for low, _ in runs], [high for _, high in runs]

    def _inside(self, at: int) -> list[Region] | None:
        """The regions a cut at `at` is inside, outermost first; None where it may not be."""
        inside = []
        for rank, region in self.index.around(at):
            if region.closing is None or self.index.blank_side(rank, at):
                return None
            inside.append(region)
        return inside

    def _mends_well(self, at: int) -> bool:
        """Whether the text before a cut at `at` with its spans closed, and the text after it
        with them opened, read as the text did: a marker written next to one of the text's
        own (`2*3*`) may pair with it instead."""
        if self._in_fence(at) is not None:
            return True  # code: nothing in it pairs
        place, inside = self._place(at), self._inside(at) or []
        if place is None:
            return False
        inline, offset = place
        spans = [r for r in inside if not r.opening.endswith(" ")]
        if not spans:
            return True
        # Read from where its segment begins, the piece before closes what opened there.
        closing = "".join(r.closing or "" for r in reversed(spans))
        opening = "".join(self._shorter.get(r, r.opening) for r in spans)
        resume = resumed_at(inline, offset, at, self.text, inside)  # as mend() goes on
        if FENCE_CUT.match(opening + self.text[resume:].split("\n", 1)[0]):
            return False  # inline code's backticks reopened at the start of a line would open a code block

        def closed(before: str) -> str:
            before = before.rstrip()
            return before + closed_by(before, closing)

        def opened(after: str) -> str:
            for region in spans:
                if region in self._shorter and region.closing:  # closed with the run it was opened with
                    after = re.sub(f"(?<!`){region.closing}(?!`)", self._shorter[region][::-1], after, count=1)
            return opening + after.lstrip()

        return self._reading(inline).reads_as_whole(offset, closed, opened)

    def _hard_cut_reads(self, at: int) -> bool:
        """Whether a cut at `at`, where no space is, leaves both pieces reading as the text did:
        the next not begun as a block ("```python" after a space), this one not ending in a
        line that alone reads as a rule or a fence ("**** ****"), each side read again."""
        if self._in_fence(at) is not None:
            return not self._closes_fence(at)  # a line of code longer than a part: code on both sides
        if self._begins_block(at) or self._makes_table(at):
            return False
        if self.text[at - 1] != "\n" and self._place(at) is None and not self._indented_code(at):
            return False  # after a list's marker, or inside a line's indent (the rest of it would read as code)
        inside = self._inside(at)
        if self.text[at - 1] != "\n" and self._ends_alone(at, inside or []):
            return False
        return self._cuts_well(at) or bool(inside) and self._mends_well(at)

    def _cuts_well(self, at: int) -> bool:
        """Whether the text on each side of a cut at `at` (in no span) reads as it did
        whole: a marker the whole left as text (`**` with nothing to close it) may pair in a
        piece with one the whole paired elsewhere."""
        place = self._place(at)
        if place is None or self._inside(at):
            return place is None and not self._inside(at)
        inline, offset = place
        return self._reading(inline).reads_as_whole(offset, str, str)

    def _makes_table(self, at: int) -> bool:
        """Whether a cut at `at` in a paragraph leaves the next piece beginning, or this one
        ending, with a table where the whole reads text (channels_app.formatting.table_cuts):
        "x | a | b |" over "|---|---|" cut after "x", the next piece's "a" and "b" a header."""
        place = self._place(at)
        if place is None:
            return False
        inline, offset = place
        if inline.content not in self._tables:
            self._tables[inline.content] = TableCuts(inline.content)
        tables = self._tables[inline.content]
        # What the next piece begins with before its text: an item's "…", spans opened again.
        if tables.opens_table(offset, after=bool(inline.items or self._inside(at))):
            return True
        begun = self._place(self._start)
        start = begun[1] if begun is not None and begun[0] is inline else 0
        return tables.ends_table(start, offset, after=bool(start))

    def _reading(self, inline: Inline) -> Segments:
        """`inline`'s text, read in segments once for every check of a cut in it."""
        if inline.content not in self._readings:
            self._readings[inline.content] = Segments(inline.content, self._reads)
        return self._readings[inline.content]

    def _reads(self, inline: str) -> tuple[Reading, bool]:
        """What an inline text shows, and whether it is closed (channels_app.formatting.reading)."""
        if inline not in self._read:
            self._read[inline] = read(inline, self.env)
        return self._read[inline]

    def _ends_alone(self, at: int, inside: list[Region]) -> bool:
        """Whether the line's text up to a cut at `at` inside it, alone, would read as a fence
        or a rule — from where the piece begins, when a cut before began it inside the line;
        but not backticks the piece's inline code is closed after: with a backtick, no fence.
        A list item's line is read from each of its markers too: "* **" is a rule, its text
        "**" none, and so is "1.  * **" in the ordered item's."""
        begins = self._line_text(at)
        if self._start > begins:  # the piece begins inside the line, after a cut
            place = self._place(at)
            if place and place[0].items:
                return False  # a list item's piece begins with its "…": no rule, no fence
            if self._run_as_text(self._start) is not None:
                return False  # it begins with a run take() escapes: no fence, no rule
            begins = self._start
        line = self.starts[bisect_right(self.starts, at) - 1]
        if self._start <= line < begins:
            quoted = QUOTED.match(self.text, line)  # matches always, maybe nothing
            marker, ink = quoted.end() if quoted else line, self._ink_before(at)
            while marker < begins:
                if _RULE.fullmatch(self.text, marker, ink):
                    return True
                found = _LEADING_MARKER.match(self.text, marker, begins)
                if found is None or found.end() == marker:
                    break
                marker = found.end()
        alone = _LINE_ALONE.fullmatch(self.text, begins, self._ink_before(at))
        if not alone or not alone.group().lstrip().startswith("`"):
            return bool(alone)
        if any("`" in (r.closing or "") for r in inside):
            return False
        ticks = alone.start() + len(alone.group()) - len(alone.group().lstrip())
        run = len(alone.group().lstrip()) - len(alone.group().lstrip().lstrip("`"))
        line_end = self.text.find("\n", at)
        if "`" in self.text[ticks + run:line_end if line_end >= 0 else len(self.text)]:
            # A backtick after them in the piece: no fence; after the cut: take() escapes the first.
            return False
        # Backticks closing inline code begun on a line before: the piece joins them to it (take).
        return not any((r.closing or "").startswith("`") for _, r in self.index.around(ticks))

    def _begins_block(self, at: int) -> bool:
        """Whether a piece begun at `at` would begin with what Markdown reads as a block, its
        text there read otherwise (three backticks the piece writes as text are not): from
        where it goes on, too, in a paragraph, after the white space it leaves out ("    - a",
        a dash in the paragraph's line, would be a list item)."""
        begins = at
        if (place := self._place(at)) is not None:
            begins = resumed_at(place[0], place[1], at, self.text, self._inside(at) or [])
        return (self._begins_block_in(self.text, at) or self._begins_block_in(self.text, begins)) and (
            self._run_as_text(begins) is None)

    def _begins_block_in(self, text: str, at: int) -> bool:
        """`begins_block` in the reply's text or a paragraph's inline text, each's lines read once."""
        return begins_block(text, at, self._line_ends_of(text))

    def _line_ends_of(self, text: str) -> LineEnds:
        if text not in self._line_ends:
            self._line_ends[text] = LineEnds(text)
        return self._line_ends[text]

    def _run_as_text(self, at: int) -> tuple[int, int] | None:
        """(where, how many) of the run of backticks or tildes a piece begun at `at`, inside a
        line, would begin with (three or more, maybe after a few spaces) where its line
        reads them as text, in no span (not inline code, neither its backticks nor inside
        it): written at a line's start they could open a code block ("x ~~~~…" longer than
        a part: an empty one, left out), and escaped they read as they did. So too the first
        of the underscores, stars or dashes the rest of the line would read as a rule ("____…",
        "_ _ _ …")."""
        if at <= 0 or self.text[at - 1] == "\n":
            return None
        run = _FENCE_RUN.match(self.text, at)
        if run is None or self.index.around(run.start(1)):
            return None
        if run.group(1) in ("-", "*", "_"):  # a rule's first marker escaped: no rule, and nothing after it pairs
            return (run.start(1), 1) if self._line_ends_of(self.text).rule_at(run.start(1)) else None
        # Where the run ends (a long one is not read again at each cut in it): inline code opened
        # by it begins there.
        opens_code = self._run_ends[bisect_right(self._run_starts, run.start(1)) - 1]
        if any(r.low == opens_code and r.opening == self.text[run.start(1):opens_code] for r in self.regions):
            return None
        return run.start(1), opens_code - run.start(1)


def resumed_at(inline: Inline, offset: int, at: int, text: str, inside: list[Region]) -> int:
    """Where the piece after a cut at `at` (`offset` in `inline`'s text) goes on from, the
    spans it is `inside` opened again before it: its text's next character, after the
    white space a cut where no space is may fall before (a span's marker before white
    space would not open it; in inline code it is code) and the next line's markers."""
    if inline.content[offset:offset + 1].isspace() and not (inside and inside[-1].opening.startswith("`")):
        offset = text_after(inline.content, offset)
    elif text[at - 1] == " ":
        return at
    return source_offset(inline.segments, offset)


def text_after(content: str, offset: int) -> int:
    """Where the text after `offset` in an inline text goes on, as a piece begun there goes
    on from it (`resumed_at`: not in inline code): after white space ("    - a" in a
    paragraph's line is a dash in it; at a piece's start, a list item)."""
    return _SPACE.match(content, offset).end()  # type: ignore[union-attr]


def closed_by(before: str, closing: str) -> str:
    """What closes a piece ending with `before`: `closing`, after one more backslash when
    `before` ends with one that would escape it."""
    if closing and (len(before) - len(before.rstrip("\\"))) % 2:
        return "\\" + closing
    return closing
