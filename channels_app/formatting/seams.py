"""Where the model's Markdown may be cut when a block is longer than a part, and how each
piece is made whole (channels_app.split.Seams), so every part reads as the whole did.

A cut falls after a line break or a space, preferably outside every formatted span. One
inside `**…**`, `*…*`, `~~…~~`, `` `…` `` or a link's label closes them at the end of the
piece and opens them again at the start of the next (`[label](url)` ending the piece with
its address, the next beginning with `[`); a heading's cut opens the next piece with the
heading's marker, a quote's with the quote's (a quote in a list item's after the item,
marked as continued, its marker at the column of the item's text), a list item's with the item's marker and
"…" (`3. …`, `- …`: the same item, continued; a nested item under the items it is in,
each so marked, at its column, as is a line cut before a nested item), and a table's rows
with the table's header and rule written again (in a quote or a list item too, after the
item's "- …"), and a code block in a quote or a list item between its lines (or inside a
line longer than a part) with its fence closed at its column and written again in the
next piece after the quote's markers or the item marked as continued (a top-level code
block is cut by channels_app.split). Inline code between three backticks or more that
runs over lines goes on in each later piece between a shorter run its code does not hold
(its own, at a part's start, would open a code block); inline code over lines one of which
begins with a backtick, with a space after the run it is opened again with (else the two
runs would make one). Such a cut is taken only once both sides,
read again, show what the text did (channels_app.formatting.reading: read in segments, so
a long paragraph is not read again whole at every cut). Nothing is cut inside a link's
address, an image or an autolink, nor where the next piece would begin with what Markdown
reads as a block (a `- ` that was a dash in a sentence, or began a paragraph's line indented,
the indent left out of the piece; inline code's backticks reopened at the start of a line), nor where a line's text (its quotes' and list items' markers left
out, or from where a cut before began the piece) would end a piece reading as a rule or a fence (three backticks are no fence when the
piece's inline code is closed after them), nor where the piece would hold only white
space; where no clean cut is, one between words that reads as the text did comes before one
inside a word; where no space may be cut at, the cut falls between graphemes, never inside an
emoji. A line of text begun with three backticks and cut before the backtick that kept it
text has its first backtick escaped, so the piece does not open a code block; one whose
backticks close inline code begun on the line before is joined to it (a line break in code
is a space), and a piece begun inside a line with backticks it reads as text has them
escaped. Where no cut before the piece's end keeps the text, the first after it is taken (or,
none being before the text's end, no cut: the rest goes in the piece): the piece is longer
than asked, and the caller, measuring it, asks again with less room. So when what opens a
piece (items nested deep, each marked as continued) leaves a part less room than inline code
takes, the code is not split: the part holds it whole if the platform counts it within the
limit, else the text is cut as text (channels_app.formatting.parts).
Such a cut, where no space is, is held to the same rules: no piece ending in a line that
alone reads as a rule ("**** ****") or a fence, none after a list item's marker (its text
out of it) or inside a line's indent (the rest of it code). An ordered
list split over pieces goes on with its numbers: the first of its items in a piece is
written with the number it had (CommonMark numbers a list from its first item's), so "1."
written on every item still reads 1, 2, 3… over the parts; what is in an item so written
wider ("1." as "11.", or continued as "11. …") is written as many columns further in, so
an item nested in it stays in it.

What the text is made of, and where each piece of it is, is read once before any cut
(channels_app.formatting.layout); this module decides the cuts and what mends them.
"""
from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from typing import Any

import regex

from ..split import Seam
from .layout import Inline, MarkdownLayout, chain, source_offset
from .reading import Reading, Segments, read
from .regions import Region

# What the start of a line reads as a block, were a cut to put it there.
_BLOCK_START = re.compile(r"[ \t]{0,3}(?:#{1,6}(?:[ \t]|$)|>|[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|`{3}|~{3}|=+[ \t]*$"
                          r"|(?:[-*_][ \t]*){3,}$)", re.MULTILINE)  # $: the line's end, a line break after it too
# What the start of a line, cut from the rest of it, reads as where the whole line did not (a
# fence, a rule, a heading's underline; a list item's marker or a heading's, alone, an empty one).
_LINE_ALONE = re.compile(r"[ \t]{0,3}(?:(?:`{3,}|~{3,}).*|(?:[-*_][ \t]*){3,}|=+|-+|[-+*]|\d{1,9}[.)]|#{1,6})")
# A line's start (within quotes and list items) that opens a code block with backticks.
_FENCE_CUT = re.compile(r"[ \t]*(?:(?:>|[-+*]|\d{1,9}[.)])[ \t]*)*(`{3,})[^`]*\Z")
# A line that is a rule, whatever its indent (a cut that might make one is left for another).
_RULE = re.compile(r"[ \t]*(?:[-*_][ \t]*){3,}")
_LEADING_MARKER = re.compile(r"[ \t]*(?:>|[-+*]|\d{1,9}[.)])[ \t]*")  # one of a line's quote or item markers
_HEADING_END = re.compile(r"(?:^|[ \t])#+\Z")
_QUOTED = re.compile(r"(?:[ \t]*>[ \t]?)*")  # a line's quotes' markers
_RUNS = "*_~`"
_GRAPHEME = regex.compile(r"\X")
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
CLEAN_LINE, CLEAN_SPACE, MENDED_LINE, MENDED_SPACE = range(4)


class MarkdownSeams(MarkdownLayout):
    """channels_app.split.Seams for the model's Markdown `text` (read by MarkdownLayout);
    `env`, the whole reply's link references."""

    def __init__(self, text: str, env: dict[str, Any] | None = None) -> None:
        super().__init__(text, env)
        self._start = 0  # where the piece being cut begins
        self._part = len(text)  # how much a part holds
        self._read: dict[str, tuple[Reading, bool]] = {}
        self._readings: dict[str, Segments] = {}

    def cut(self, start: int, hard: int, part: int) -> int:
        # In the piece's second half the best kind of cut, the latest of its kind; else the
        # latest there is (a piece cut short to stay clean is a part sent near empty).
        middle = start + (hard - start) // 2
        self._part = part
        self._start = start
        ranked: list[tuple[int, int]] = []  # the second half's cuts: (rank, -offset), checked best first
        piece = self.text[start:hard]
        ink = start + len(piece) - len(piece.lstrip())  # a cut before it leaves the piece blank
        for at in range(min(hard, len(self.text) - 1), ink, -1):
            before = self.text[at - 1]
            if before not in " \n" or before == " " and self.text[at].isspace():
                continue  # a cut falls after a line break, or after the last of a run of spaces
            if at <= middle:
                if ranked and (found := self._checked(sorted(ranked))) is not None:
                    return found
                ranked = []
                rank = self._rank(at)
                if rank is not None and (rank not in (MENDED_LINE, MENDED_SPACE) or self._mends_well(at)):
                    return at
                continue
            rank = self._rank(at)
            if rank is not None:
                ranked.append((rank, -at))
                if rank == CLEAN_LINE:
                    break
        if ranked and (found := self._checked(sorted(ranked))) is not None:
            return found
        # No space to cut at: a hard cut, never inside what is not to be cut (a link's
        # address): before it, or when the piece begins with it, after it.
        whole = [r for _, r in self.index.around(hard) if r.closing is None]
        # A line of code longer than a part (or the last, with the closing fence after it, in a piece
        # begun in the code): cut between graphemes.
        fence = next((f for f in self.fences if f.low < hard < f.high or f.low <= start < f.high), None)
        if fence is not None:
            bounds = [at for at in self._graphemes(start, min(hard, fence.high)) if at > start and self._in_fence(at)
                      and not self._closes_fence(at)]
            if bounds:
                return bounds[-1]
        if not whole:  # nor inside an entity or after a backslash, nor where the next piece begins as a block
            for entity in _ENTITY.finditer(self.text, max(start, hard - 40), min(len(self.text), hard + 40)):
                if entity.start() < hard < entity.end() and entity.start() > start:
                    hard = entity.start()
            # Only between graphemes: not inside an emoji joined by ZWJs, a flag, a letter and its accents.
            bounds = [at for at in self._graphemes(start, hard) if at > start]
            hard = bounds[-1] if bounds else hard  # none: one grapheme longer than a part, cut anyway
            while len(bounds) > 1 and (self._begins_block(hard) or self.text[hard - 1] == "\\"
                                       or self.text[hard - 1] in _RUNS and self.text[hard - 1] == self.text[hard:hard + 1]):
                bounds.pop()
                hard = bounds[-1]
            # Between words first, where no clean cut was (the latest in the piece's second
            # half that reads as the text did); only then inside a word, near its end.
            for back in range(min(hard, len(self.text) - 1), max(ink, middle), -1):
                if self.text[back - 1] == " " and not self.text[back].isspace() and self._hard_cut_reads(back):
                    return back
            for back in reversed(bounds):  # where both sides read as they did
                if back <= hard - 64:
                    break
                if self._hard_cut_reads(back):
                    return back
            # None: the first such cut after it, the piece longer than asked (the caller
            # measures what it writes, and asks again with less room), not one that loses text;
            # or none, the rest of the text in the piece (what a continuation's markers leave
            # of a part may hold less than the code ending the text: split, it showed backticks).
            for after in self._graphemes(hard, min(len(self.text), hard + 64))[1:]:
                if after == len(self.text) or self._hard_cut_reads(after):
                    return after
            return hard
        low, high = min(r.low for r in whole), max(r.high for r in whole)
        while around := [r for _, r in self.index.around(low) if r.opening == "["]:  # the link, not its label
            low = min(r.low for r in around)
        if low > start and (self.text[low - 1] == "\n" or self._place(low) is not None):
            return low
        return high

    def _graphemes(self, start: int, hard: int) -> list[int]:
        """The offsets from `start` to `hard` that fall between graphemes (regex's \\X), read
        from `start` (a cut, so between two): `hard` among them only where it is one."""
        bounds = [start]
        for grapheme in _GRAPHEME.finditer(self.text, start, min(len(self.text), hard + 64)):
            if grapheme.end() > hard:
                break
            bounds.append(grapheme.end())
        return bounds

    def _checked(self, ranked: list[tuple[int, int]]) -> int | None:
        """The first of `ranked` cuts (rank, -offset) that reads as the text did."""
        for rank, at in ranked:
            if rank not in (MENDED_LINE, MENDED_SPACE) or self._mends_well(-at):
                return -at
        return None

    def _inside(self, at: int) -> list[Region] | None:
        """The regions a cut at `at` is inside, outermost first; None where it may not be."""
        inside = []
        for rank, region in self.index.around(at):
            if region.closing is None or self.index.blank_side(rank, at):
                return None
            inside.append(region)
        return inside

    def _rank(self, at: int) -> int | None:
        if self._in_fence(at) is not None:  # code in a quote or a list item: between its lines
            return MENDED_LINE if self.text[at - 1] == "\n" else None
        inside = self._inside(at)
        if inside is None:
            return None
        place = self._place(at)
        line = self.text[at - 1] == "\n"
        if place is None and not line:
            return None  # after a list's marker, a heading's, between a table's cells
        if not line and self._ends_alone(at, inside):
            return None
        if place is not None and not inside and not place[0].items and _BLOCK_START.match(
                place[0].content, _text_after(place[0].content, place[1])) and self._ticks_as_text(at) is None:
            return None  # an item's text goes on after its "…": no block begins
        if inside:
            if any(r.opening.startswith("#") for r in inside) and _HEADING_END.search(
                    self.text, self.starts[bisect_right(self.starts, at) - 1], self._ink_before(at)):
                return None  # a heading's piece ending in " #" would read it as the heading's closing #s
            closes = any(r.closing for r in inside)
            opens = any((opening := self._shorter.get(r, r.opening)) and not opening.endswith(" ") for r in inside)
            ink = self._ink_before(at)
            if closes and self.text[max(0, ink - 1):ink] in _RUNS or opens and self.text[at] in _RUNS:
                return None  # a marker written beside another would make one run of both, read otherwise
            return MENDED_LINE if line else MENDED_SPACE
        if line and place is None and re.match(r" {4}", self.text[at:at + 4]) and not self._indented_code(at):
            return MENDED_LINE  # an indented line would read as code: it loses its indent
        return CLEAN_LINE if line else CLEAN_SPACE

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
        resume = _resume(inline, offset, at, self.text, inside)  # as mend() goes on
        if _FENCE_CUT.match(opening + self.text[resume:].split("\n", 1)[0]):
            return False  # inline code's backticks reopened at the start of a line would open a code block

        def closed(before: str) -> str:
            before = before.rstrip()
            return before + _closed(before, closing)

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
        if self._begins_block(at):
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
            begins = self._start
        line = self.starts[bisect_right(self.starts, at) - 1]
        if self._start <= line < begins:
            quoted = _QUOTED.match(self.text, line)  # matches always, maybe nothing
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
            begins = _resume(place[0], place[1], at, self.text, self._inside(at) or [])
        return bool(_BLOCK_START.match(self.text, at) or _BLOCK_START.match(self.text, begins)) and (
            self._ticks_as_text(at) is None)

    def _ticks_as_text(self, at: int) -> tuple[int, int] | None:
        """(where, how many) of the run of backticks a piece begun at `at`, inside a line,
        would begin with (three or more, maybe after a few spaces) where its line reads
        them as text, in no inline code, neither its backticks nor inside it: written at a
        line's start they could open a code block, and escaped they read as they did."""
        if at <= 0 or self.text[at - 1] == "\n":
            return None
        run = re.compile(r"[ \t]{0,3}(`{3,})").match(self.text, at)
        if run is None or self.index.around(run.start(1)):
            return None
        opens_code = run.end(1)  # inline code opened by this run begins just after it
        if any(r.low == opens_code and r.opening == run.group(1) for r in self.regions):
            return None
        return run.start(1), len(run.group(1))

    def mend(self, at: int) -> Seam:
        fence = self._in_fence(at)
        if fence is not None:  # closed in its piece, opened again in the next in what it is in
            return Seam(fence.closing, fence.opening + ("" if self.text[at - 1] == "\n" else fence.indent), at)
        inside = self._inside(at) or []
        resume, quoted = at, ""
        place = self._place(at)
        if place is not None:  # in a paragraph: the next piece begins at its text, in its quotes
            inline, offset = place
            resume = _resume(inline, offset, at, self.text, inside)
            # In its quotes, after the items they are in, continued (a quote in a list item goes on in it).
            quoted = inline.lead + inline.quoted
            if inline.items:  # a list item's text goes on as that item, marked as continued, at its level
                quoted = inline.lead + chain([(inline.quoted, item) for item in inline.items])
        elif self.text[at - 1] == "\n" and (nested := self._nested(at))[0]:
            # A line of a nested list item (its first, or more of its text), or of a quote in
            # one, goes on under the items it is in, marked as continued, so it keeps its
            # level and its indent.
            quoted, blank = nested
            if blank is not None and re.match(r"(?:[ \t]*>)*[ \t]*\d", self.text[at:at + 64]):  # numbered on
                quoted += blank + "\n"
        elif self.text[at - 1] == "\n" and re.match(r" {4}", self.text[at:at + 4]) and not self._indented_code(at):
            resume = at + len(self.text[at:]) - len(self.text[at:].lstrip(" "))
        elif self.text[at - 1] != "\n" and self._indented_code(at):
            # A line of indented code longer than a part: the next piece goes on with it at its indent.
            quoted = self.code_indent(at)
        closing = "".join(self._closing(r) for r in reversed(inside))
        # A table's rows go on under its header, written again when a part holds it with the row
        # after the cut; one in a list item under the item's "- …" line, the header at the item's indent.
        header = next((header for low, high, header in self.tables if low < at <= high), "")
        if len(header) + len(quoted) + len(self.text[at:self._line_end(bisect_right(self.starts, at) - 1)]) >= self._part:
            header = ""
        opening = header + quoted if not quoted.endswith("\n") else quoted + header
        return Seam(_closed(self.text[:at].rstrip(), closing), opening + "".join(self._shorter.get(r, r.opening)
                                                                                 for r in inside), resume)

    def _closing(self, region: Region) -> str:
        """What closes `region` at the end of the piece being cut: a piece of inline code begun
        in a piece before is closed with the run it was opened again with."""
        if region in self._shorter and region.low < self._start:
            return self._shorter[region][::-1]
        return region.closing or ""

    def _shortened(self, piece: str, start: int, end: int) -> str:
        """`piece`, the text from `start` to `end`, with the closing run of inline code it
        began inside, opened again with a shorter one, written as that one."""
        for region, shorter in self._shorter.items():
            if region.low < start < region.high <= end and region.closing:
                run = re.compile(f"(?<!`){region.closing}(?!`)")
                return run.sub(shorter[::-1], piece, count=1)
        return piece

    def take(self, start: int, end: int, since: int) -> str:
        """The text, the first of an ordered list's items in the piece written with its number,
        and the lines of an item written wider than in the text as many columns further in."""
        edits: list[tuple[int, int, str]] = []  # (offset, characters replaced, what is written instead)
        renumbered = set()
        for marker, line, written, number in self.numbers:
            if not start <= marker < end or self.firsts.get(marker, -1) >= since or str(number) == written:
                continue
            begins = self.starts[line]
            if start <= begins and begins > since and self.text[self.starts[line - 1]:begins].strip():
                # a list not begun at 1 cannot interrupt a paragraph: a blank line ends it first
                edits.append((begins, 0, "\n"))
            edits.append((marker, len(written), str(number)))
            renumbered.add(marker)
        if self.widened:  # "1." written "11.": what is in it needs a column more to stay in it
            line = bisect_left(self.starts, start)  # the first line begun in the piece
            while line < len(self.starts) and self.starts[line] < end:
                more = sum(wider for marker, first, after, wider in self.widened
                           if first < line < after and (marker < since or marker in renumbered))
                quoted = _QUOTED.match(self.text, self.starts[line])  # matches always, maybe nothing
                if more and quoted:
                    edits.append((quoted.end(), 0, " " * more))
                line += 1
        out, at = [], start
        for offset, replaced, written in sorted(edits, key=lambda edit: edit[0]):
            out.append(self.text[at:offset] + written)
            at = offset + replaced
        out.append(self.text[at:end])
        piece = self._shortened("".join(out), start, end)
        ticks = self._ticks_as_text(start)
        if ticks is not None and ticks[0] + ticks[1] <= end:  # text, not the fence of a code block
            skip = ticks[0] - start
            piece = piece[:skip] + "\\`" * ticks[1] + piece[skip + ticks[1]:]
        # After: a line whose backticks are escaped already opens no code block, and is left as it is.
        return self._unfenced(piece, end)

    def _unfenced(self, piece: str, end: int) -> str:
        """`piece`, ending at `end`, with the first backtick of its last line escaped where
        that line, cut there, would open a code block and did not whole: a run of three
        backticks begins it and the backtick after them, which kept it text, is past the cut
        (a piece that is an empty code block shows nothing, and was left out)."""
        if end >= len(self.text) or self.text[end - 1] == "\n" or self._in_fence(end) is not None:
            return piece
        line = piece[piece.rfind("\n") + 1:]
        opens = _FENCE_CUT.match(line)
        line_end = self.text.find("\n", end)
        if opens is None or "`" not in self.text[end:line_end if line_end >= 0 else len(self.text)]:
            return piece
        if any("`" in (region.closing or "") for region in self._inside(end) or []):
            return piece  # the mend closes inline code after it: not a code block
        at = len(piece) - len(line) + opens.start(1)
        if any((region.closing or "").startswith("`") for _, region in self.index.around(end - len(piece) + at)):
            # They close inline code begun on a line before: escaped, they would show a
            # backslash. Its line break is a space in the code: the line joined to the one
            # before, they close it there and open no code block.
            begins = len(piece) - len(line)
            if not begins:
                return piece
            line_start = end - len(line)  # its quotes' markers and indent left out, not its text
            return piece[:begins - 1] + " " + piece[begins + self._line_text(end - len(piece) + at) - line_start:]
        return piece[:at] + "\\" + piece[at:]


def _resume(inline: Inline, offset: int, at: int, text: str, inside: list[Region]) -> int:
    """Where the piece after a cut at `at` (`offset` in `inline`'s text) goes on from, the
    spans it is `inside` opened again before it: its text's next character, after the
    white space a cut where no space is may fall before (a span's marker before white
    space would not open it; in inline code it is code) and the next line's markers."""
    if inline.content[offset:offset + 1].isspace() and not (inside and inside[-1].opening.startswith("`")):
        offset += len(inline.content[offset:]) - len(inline.content[offset:].lstrip())
    elif text[at - 1] == " ":
        return at
    return source_offset(inline.segments, offset)


def _text_after(content: str, offset: int) -> int:
    """Where the text after `offset` in an inline text goes on, as a piece begun there goes
    on from it (`_resume`: not in inline code): after white space ("    - a" in a
    paragraph's line is a dash in it; at a piece's start, a list item)."""
    return offset + len(content[offset:]) - len(content[offset:].lstrip())


def _closed(before: str, closing: str) -> str:
    """What closes a piece ending with `before`: `closing`, after one more backslash when
    `before` ends with one that would escape it."""
    if closing and (len(before) - len(before.rstrip("\\"))) % 2:
        return "\\" + closing
    return closing
