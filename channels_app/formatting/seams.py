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
the indent left out of the piece; inline code's backticks reopened at the start of a line), nor where
either piece would read as a table lines the whole reads as text (the rest of "x | a | b |"
over "|---|---|": channels_app.formatting.table_cuts), nor where a line's text (its quotes' and list items' markers left
out, or from where a cut before began the piece) would end a piece reading as a rule or a fence (three backticks are no fence when the
piece's inline code is closed after them), nor where the piece would hold only white
space; where no clean cut is, one between words that reads as the text did comes before one
inside a word; where no space may be cut at, the cut falls between graphemes, never inside an
emoji. A line of text begun with three backticks and cut before the backtick that kept it
text has its first backtick escaped, so the piece does not open a code block; one whose
backticks close inline code begun on the line before is joined to it (a line break in code
is a space), and a piece begun inside a line with three backticks or tildes or more it
reads as text, or underscores, stars or dashes that the rest of its line would read as a
rule ("_ _ _ …" too), has them escaped (its first, where the rest could pair with nothing), so it
opens no code block and shows no rule: "x " and a run of tildes longer than a part is cut
where each part is full, every piece after the first beginning "\\~~~". Where no cut before the piece's end keeps the text, the first after it is taken (or,
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
(channels_app.formatting.layout); whether a cut reads as the text did is checked by
channels_app.formatting.cut_checks; this module decides the cuts and what mends them.
"""
from __future__ import annotations

import re
from bisect import bisect_left, bisect_right

import regex

from ..split import Seam
from .cut_checks import FENCE_CUT, QUOTED, RUNS, CutChecks, closed_by, resumed_at, text_after
from .list_items import chain
from .regions import Region

_HEADING_END = re.compile(r"(?:^|[ \t])#+\Z")
_GRAPHEME = regex.compile(r"\X")
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
CLEAN_LINE, CLEAN_SPACE, MENDED_LINE, MENDED_SPACE = range(4)


class MarkdownSeams(CutChecks):
    """channels_app.split.Seams for the model's Markdown `text` (read by MarkdownLayout, each
    cut checked by CutChecks); `env`, the whole reply's link references."""

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
            full = bounds[:]
            while len(bounds) > 1:
                if self.text[hard - 1] in RUNS and self.text[hard - 1] == self.text[hard:hard + 1]:
                    run = hard - 1  # not inside a run of markers: before it, in one step
                    while run > start and self.text[run - 1] == self.text[hard]:
                        run -= 1
                    while len(bounds) > 1 and bounds[-1] > run:
                        bounds.pop()
                elif self._begins_block(hard) or self.text[hard - 1] == "\\":
                    bounds.pop()
                else:
                    break
                hard = bounds[-1]
            if len(bounds) == 1:  # the piece is all such a run (or blocks): cut where the part is full
                bounds = full
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
        if not line and self._ends_alone(at, inside) or self._makes_table(at):
            return None
        if place is not None and not inside and not place[0].items and self._begins_block_in(
                place[0].content, text_after(place[0].content, place[1])) and self._run_as_text(at) is None:
            return None  # an item's text goes on after its "…": no block begins
        if inside:
            if any(r.opening.startswith("#") for r in inside) and _HEADING_END.search(
                    self.text, self.starts[bisect_right(self.starts, at) - 1], self._ink_before(at)):
                return None  # a heading's piece ending in " #" would read it as the heading's closing #s
            closes = any(r.closing for r in inside)
            opens = any((opening := self._shorter.get(r, r.opening)) and not opening.endswith(" ") for r in inside)
            ink = self._ink_before(at)
            if closes and self.text[max(0, ink - 1):ink] in RUNS or opens and self.text[at] in RUNS:
                return None  # a marker written beside another would make one run of both, read otherwise
            return MENDED_LINE if line else MENDED_SPACE
        if line and place is None and re.match(r" {4}", self.text[at:at + 4]) and not self._indented_code(at):
            return MENDED_LINE  # an indented line would read as code: it loses its indent
        return CLEAN_LINE if line else CLEAN_SPACE

    def mend(self, at: int) -> Seam:
        fence = self._in_fence(at)
        if fence is not None:  # closed in its piece, opened again in the next in what it is in
            return Seam(fence.closing, fence.opening + ("" if self.text[at - 1] == "\n" else fence.indent), at)
        inside = self._inside(at) or []
        resume, quoted = at, ""
        place = self._place(at)
        if place is not None:  # in a paragraph: the next piece begins at its text, in its quotes
            inline, offset = place
            resume = resumed_at(inline, offset, at, self.text, inside)
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
        return Seam(closed_by(self.text[:at].rstrip(), closing), opening + "".join(self._shorter.get(r, r.opening)
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
                quoted = QUOTED.match(self.text, self.starts[line])  # matches always, maybe nothing
                if more and quoted:
                    edits.append((quoted.end(), 0, " " * more))
                line += 1
        out, at = [], start
        for offset, replaced, written in sorted(edits, key=lambda edit: edit[0]):
            out.append(self.text[at:offset] + written)
            at = offset + replaced
        out.append(self.text[at:end])
        piece = self._shortened("".join(out), start, end)
        run = self._run_as_text(start)
        if run is not None:  # text, not the fence of a code block
            skip, char, after = run[0] - start, self.text[run[0]], run[0] + run[1]
            # Its first; every one where the rest of it could pair with a run after it in the piece
            # (inline code, struck).
            escaped = run[1] if after <= end and char in self.text[after:end] else 1
            piece = piece[:skip] + ("\\" + char) * escaped + piece[skip + escaped:]
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
        opens = FENCE_CUT.match(line)
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
