"""What an inline text of the model's Markdown shows, and the check made at a cut of it:
that the two sides, each made whole (channels_app.formatting.seams), show what it did.

Reading each side whole at every candidate cut cost the paragraph's length each time, so
a long paragraph was read as many times over as it had cuts. Instead the text is read once
in segments, each ending after a space or a line break (or inside a run of one marker
longer than a segment, "~~~~…", which has no space to end at), and a side is read as the
segments before it, read already, then the piece of its own. That is exact when a segment
is closed: read alone, it leaves no marker unmatched that could still open a span (`*`,
`_`, `~~`), no `[` that did not make a link (its label or address could end later) and no
backtick that did not make code (its closing run could come later). In CommonMark's inline
rules nothing else reaches over white space: a marker's run is read from the characters
beside it (a space, or the start, which reads alike), and a closing marker looks back only
for what is still open. What follows a closed text can neither pair with it nor change how
it was read, so the two read together as each read alone. A segment that is not closed is
read on into the next; and should the segments not read as the whole text did, the text is
taken as one segment, as before.
"""
from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from functools import cache
from typing import Any, NamedTuple

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
SEGMENT = 256  # characters a segment is read in, at least
_OPEN = "qorven_open"  # set in the env by the parse: a marker that could open was left unmatched
_GAP = re.compile(r"[ \n](?=\S)")
_RUN = re.compile(r"([*_~-])\1{63}")  # a run of one marker this long: a segment may end inside it too


class Reading(NamedTuple):
    """What a text shows: its characters, white space left out, and the formatting of each
    (one list, not a pair per character: a long paragraph's reading is thousands of them)."""

    chars: str
    kinds: list[frozenset[str]]

    def then(self, other: Reading) -> Reading:
        return Reading(self.chars + other.chars, self.kinds + other.kinds)

    def part(self, start: int, end: int) -> Reading:
        return Reading(self.chars[start:end], self.kinds[start:end])


def _note_open(state: StateInline) -> None:
    state.env[_OPEN] = any(d.open and d.end < 0 for d in state.delimiters)


@cache
def _reader() -> MarkdownIt:
    """The reply's parser (channels_app.formatting.render.parser), noting what stays open."""
    md = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    md.inline.ruler2.push("qorven_note_open", _note_open)
    return md


def read(inline: str, env: dict[str, Any]) -> tuple[Reading, bool]:
    """What `inline` shows — each character (white space left out) with its formatting — and
    whether it is closed (see above). `env`: the reply's link references."""
    state = dict(env)
    chars: list[str] = []
    kinds: list[frozenset[str]] = []
    stack: list[str] = []
    for token in _reader().parseInline(inline, state)[0].children or []:
        if token.nesting == 1:
            stack.append(f"{token.type} {token.attrs.get('href', '')}")
        elif token.nesting == -1 and stack:
            stack.pop()
        elif token.type in ("text", "code_inline", "image"):
            shown = "".join(token.content.split())
            chars.append(shown)
            kinds += [frozenset([*stack, token.type])] * len(shown)
            if token.type == "text" and ("[" in shown or "`" in shown):
                state[_OPEN] = True
    return Reading("".join(chars), kinds), not state.get(_OPEN)


class Segments:
    """An inline text read in closed segments; `reads` reads (and caches) any text."""

    def __init__(self, content: str, reads: Callable[[str], tuple[Reading, bool]]) -> None:
        self.content, self.reads = content, reads
        self.bounds = [0]  # where each segment begins, then the text's end
        self.counts = [0]  # characters shown before each segment
        chars: list[str] = []
        kinds: list[frozenset[str]] = []
        while (start := self.bounds[-1]) < len(content):
            end = self._gap(start + SEGMENT)
            while True:
                shown, closed = reads(content[start:end])
                if closed or end == len(content):
                    break
                end = self._gap(start + 2 * (end - start))  # read on, twice as far
            chars.append(shown.chars)
            kinds += shown.kinds
            self.bounds.append(end)
            self.counts.append(len(kinds))
        self.whole = reads(content)[0]
        if Reading("".join(chars), kinds) != self.whole:  # not as the whole read: one segment, read whole
            self.bounds, self.counts = [0, len(content)], [0, len(self.whole.chars)]

    def _gap(self, at: int) -> int:
        """The first offset from `at` on after a space or a line break, before what is not
        white space, or inside a long run of one marker (read alone, each side of it shows
        what it did, where the text has nothing to pair it with: a segment ends there too,
        so each cut in "~~~~…" longer than a part does not read the run from its start);
        or the text's end."""
        start = max(at, 1) - 1
        run = _RUN.search(self.content, start)
        inside = max(at, run.start() + SEGMENT // 8) if run else len(self.content)
        found = _GAP.search(self.content, start, inside)
        return found.end() if found else inside

    def _in_run(self, bound: int) -> bool:
        """Whether a segment ends at `bound` inside a run of one marker (`_gap`)."""
        return self.content[bound - 1:bound] == self.content[bound:bound + 1] and self.content[bound:bound + 1] in (
            "*", "_", "~", "-")

    def reads_as_whole(self, at: int, before: Callable[[str], str], after: Callable[[str], str]) -> bool:
        """Whether the text before offset `at`, its end made whole by `before`, and the text
        from `at` on, its start made whole by `after`, show together what the text did."""
        bounds, content = self.bounds, self.content
        first = max(0, bisect_left(bounds, at) - 1)  # the segment the side before `at` ends in
        last = min(bisect_right(bounds, at), len(bounds) - 1)  # the first bound after `at`
        shown = self.reads(before(content[bounds[first]:at]))[0]
        while True:
            written = after(content[at:bounds[last]])
            rest, closed = self.reads(written)
            if last == len(bounds) - 1 or closed and (written.endswith((" ", "\n")) or self._in_run(bounds[last])):
                break
            last = min(len(bounds) - 1, bisect_left(bounds, at + 2 * (bounds[last] - at)))
        return shown.then(rest) == self.whole.part(self.counts[first], self.counts[last])
