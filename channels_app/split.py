"""Split a reply to a platform's length limit without breaking code blocks or characters.

The text is cut into blocks — fenced code blocks whole, prose by paragraph — and packed
greedily into parts. A code block that fits in a part, measured as the platform shows it
(its lines and what it shows of the fences, `framing`), is never split; one longer than a
part is cut by lines, each piece closed and re-opened with the same fence so every part
renders as code (a longer one where a piece's line would close it), as many lines to a
piece as fit beside what the platform shows of the fences (`framing`).

Lengths are measured the way the platform counts them (`size`: code points by default,
UTF-16 code units for Telegram), and a cut falls between user-perceived characters
(extended grapheme clusters, regex's \\X): an emoji with its skin tone, a family joined by
ZWJs, a flag or a letter with its accents is never shown as two broken halves.

Text with structure of its own (the model's Markdown) says through `Seams` where prose may
be cut and how each piece is made whole: what closes the piece before a cut, what opens
the one after it, and how a piece is taken from the text.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

import regex

Size = Callable[[str], int]
_GRAPHEME = regex.compile(r"\X")


class Seam(NamedTuple):
    """A cut mended: `closing` ends the piece before it, `opening` begins the next, which
    goes on from offset `resume` of the text."""

    closing: str
    opening: str
    resume: int


class Seams(Protocol):
    def cut(self, start: int, hard: int, part: int) -> int:
        """Where to cut the text's prose between offsets `start` and `hard` (in both
        excluded and included): the piece before it must end at or before `hard`. `part`:
        how much a part holds (the next, begun by what `mend` opens it with, is that long).
        A cut at the end of the prose is none: the rest of it goes in the piece."""
        ...

    def mend(self, at: int) -> Seam:
        """How the pieces on both sides of a cut at offset `at` are made whole."""
        ...

    def take(self, start: int, end: int, since: int) -> str:
        """The text from `start` to `end`, in a piece that took the text from `since` on."""
        ...

    def blocks(self) -> list[tuple[str, str]]:
        """The text as [(kind, text)]: 'code', a whole code block that stands on its own (cut
        by its lines, each piece fenced again), or 'prose', what is between them (where a
        code block in something else — a quote, a list item — is cut through `cut`)."""
        ...


class Verbatim:
    """Plain text: cut after a line break, else a space; the pieces as they are. `code`:
    whether a line of three backticks opens a code block, cut by its lines and fenced again
    in each piece (Markdown's reading); else they are characters like any other, and no
    fence is added to a piece."""

    def __init__(self, text: str, *, code: bool = True) -> None:
        self.text = text
        self.code = code

    def cut(self, start: int, hard: int, part: int) -> int:
        for sep in ("\n", " "):
            cut = self.text.rfind(sep, start + 1, hard)
            if cut > start:
                return cut + 1
        return hard

    def mend(self, at: int) -> Seam:
        return Seam("", "", at)

    def take(self, start: int, end: int, since: int) -> str:
        return self.text[start:end]

    def blocks(self) -> list[tuple[str, str]]:
        return _blocks(self.text) if self.code else [("prose", self.text)]


def _run(line: str) -> str:
    """The fence a code block's first line opens it with: its run of ` or ~."""
    return line[:len(line) - len(line.lstrip(line[:1]))]


def _opens(line: str) -> bool:
    """Whether `line` (its indent left out) opens a code block: three ` or ~ or more, and
    after backticks no backtick (else it is inline code, by CommonMark's rule)."""
    run = _run(line)
    return len(run) >= 3 and run[0] in "`~" and not (run[0] == "`" and "`" in line[len(run):])


def _closes(line: str, fence: str) -> bool:
    """Whether `line` (its indent left out) closes a code block opened by `fence`: a run of
    the same character at least as long, then nothing but spaces (CommonMark's rule; a
    line like "```**" is the block's text)."""
    run = _run(line)
    return run[:1] == fence[:1] and len(run) >= len(fence) and not line[len(run):].strip()


def _blocks(text: str) -> list[tuple[str, str]]:
    """[(kind, text)] with kind 'code' (a whole fenced block) or 'prose', in order: together
    they are `text`."""
    out: list[tuple[str, str]] = []
    lines = text.splitlines(keepends=True)
    buf: list[str] = []
    in_code = False
    fence = ""
    for line in lines:
        stripped = line.lstrip()
        if not in_code and _opens(stripped):
            if buf:
                out.append(("prose", "".join(buf)))
                buf = []
            in_code, fence = True, _run(stripped)
            buf.append(line)
            continue
        buf.append(line)
        if in_code and _closes(stripped, fence) and len(buf) > 1:
            out.append(("code", "".join(buf)))
            buf, in_code = [], False
    if buf:
        out.append(("code" if in_code else "prose", "".join(buf)))
    return out


def _fit(text: str, room: int, size: Size) -> int:
    """The longest prefix of `text` (an index) measuring at most `room` that ends between
    graphemes; at least one code point when `room` allows one, so a single grapheme longer
    than a part (a letter under thousands of marks) is still cut and sent, not looped on."""
    if size(text) <= room:
        return len(text)
    # The longest prefix in code points that fits (a size adds up over the text, so it
    # grows with the prefix), found by halving; then the last grapheme's end within it.
    fits, over = 0, len(text)
    while over - fits > 1:
        middle = (fits + over) // 2
        if size(text[:middle]) <= room:
            fits = middle
        else:
            over = middle
    end = 0
    for match in _GRAPHEME.finditer(text):
        if match.end() > fits:
            break
        end = match.end()
    return max(end or fits, 1)  # not even one grapheme fits: cut it between code points


def _pieces(text: str, room: int, size: Size) -> list[str]:
    """`text` hard-cut into pieces of at most `room`."""
    out = []
    while text:
        cut = _fit(text, room, size)
        out.append(text[:cut])
        text = text[cut:]
    return out


def _fenced(opening: str, lines: list[str]) -> tuple[str, str]:
    """The opening and closing lines a piece of code `lines` is written between: the block's
    own fence, unless a line of the piece would close it (a hard-cut piece that is only
    backticks, its text before and after them in other pieces), when a fence one longer
    than any such line's run (CommonMark closes a block only with one at least as long)."""
    indent = opening[:len(opening) - len(opening.lstrip())]
    fence = _run(opening.lstrip())
    runs = [len(_run(line.lstrip())) for line in lines if _closes(line.lstrip(), fence)]
    if not runs:
        return opening, fence + "\n"
    longer = fence[0] * (max(runs) + 1)
    return indent + longer + opening.lstrip()[len(fence):], longer + "\n"


def _cut_code(block: str, limit: int, size: Size, framing: Size | None = None) -> list[str]:
    """A code block longer than `limit` in pieces, each closed and opened again with its
    fence; `framing`: what the platform shows of a piece's fences, its opening line given
    (as written, when not given)."""
    lines = block.splitlines(keepends=True)
    opening = lines[0]
    fence = _run(opening.lstrip())
    closing_present = len(lines) > 1 and _closes(lines[-1].lstrip(), fence)
    body = lines[1:-1] if closing_present else lines[1:]
    close = fence + "\n"
    # A line break of its own closes the last line of a piece (`closed`).
    room = limit - (framing(opening) if framing else size(opening) + size(close)) - 1
    if room <= 0:
        # Its fences alone fill a part: no piece of it can be code. Each is fenced all the
        # same, and passes the limit: the caller, which measures what it writes, cuts the
        # block as text (channels_app.formatting.parts). Cut hard, "```py" would be an empty
        # code block, the rest of its pieces Markdown, and the fence left open.
        room = 1

    def closed(current: list[str]) -> str:
        if current and not current[-1].endswith("\n"):
            current = [*current[:-1], current[-1] + "\n"]
        first, last = _fenced(opening, current)
        return first + "".join(current) + last

    pieces: list[str] = []

    def keep(current: list[str]) -> None:
        # A piece of nothing but blank lines or spaces (where a block, or a line cut hard,
        # is parted) would show an empty code block: it is left out.
        if any(line.strip() for line in current):
            pieces.append(closed(current))

    current: list[str] = []
    used = 0
    for line in body:
        if size(line) > room:  # a single line longer than a part
            if current:
                keep(current)
                current, used = [], 0
            # Cut without its line break: a piece of nothing but that would be an empty block.
            ending = line[len(line.rstrip("\n")):]
            *whole, line = _pieces(line.removesuffix(ending), room, size)
            for piece in whole:
                keep([piece])
            line += ending
        if used + size(line) > room and current:
            keep(current)
            current, used = [], 0
        current.append(line)
        used += size(line)
    keep(current)
    if not pieces:
        pieces.append(closed(current))
    return pieces


def _shown(block: str, size: Size, framing: Size | None) -> int:
    """What a code block (or a piece of one, fenced) takes of a part: its lines, and what the
    platform shows of its fences (`framing`; as written, when not given)."""
    if framing is None:
        return size(block)
    lines = block.splitlines(keepends=True)
    fence = _run(lines[0].lstrip())
    body = lines[1:-1] if len(lines) > 1 and _closes(lines[-1].lstrip(), fence) else lines[1:]
    return framing(lines[0]) + size("".join(body).removesuffix("\n"))


def split_message(text: str, limit: int, *, size: Size = len, min_fill: int = 200,
                  seams: Seams | None = None, framing: Size | None = None) -> list[str]:
    """Parts of at most `limit` (as `size` measures), in order, that together say all of
    `text` — but for a code block whose fences alone fill a part, whose pieces pass it
    (the caller cuts that as text: `_cut_code`). Prose fills each part; code blocks move
    whole to the next part when they do not fit. `seams`: where prose may be cut and how its pieces are mended (plain text's
    by default); `framing`: what a code block's fences take of a part, its opening line
    given (what `size` measures of them, by default)."""
    if size(text) <= limit:
        return [text]
    seams = seams or Verbatim(text)
    parts: list[str] = []
    current = opening = ""  # the part begun; what a cut opened it with
    since = 0  # where the part begun took the text from
    unshown = 0  # what the part begun holds of code blocks' fences that the platform does not show

    def used() -> int:
        return size(current) - unshown

    def flush() -> None:
        nonlocal current, opening, unshown
        if current.strip():
            parts.append(current.strip("\n"))
        current = opening = ""
        unshown = 0

    at = 0
    for kind, block in seams.blocks():
        start, end = at, at + len(block)
        at = end
        if kind == "code":
            # Measured as the platform shows it: Telegram shows neither fences nor language.
            for piece in [block] if _shown(block, size, framing) <= limit else _cut_code(block, limit, size, framing):
                shown = _shown(piece, size, framing)
                if used() + shown > limit:
                    flush()
                if current == opening:
                    since = start
                current += piece
                unshown += size(piece) - shown
            continue
        while start < end:
            if current == opening:
                since = start
            room = limit - used()
            rest = seams.take(start, end, since)
            if size(rest) <= room:
                current += rest
                break
            if room < min_fill and current and current != opening:
                flush()
                continue
            fits = _fit(text[start:end], room, size)
            cut = max(start + 1, min(seams.cut(start, start + fits, limit), end))
            if cut == end:  # no cut reads as the text did before its end: the rest, longer than asked
                current += rest
                break
            seam = seams.mend(cut)
            head = seams.take(start, cut, since)
            if seam.closing:  # what it adds may pass the limit: the caller measures what it writes
                head = head.rstrip() + seam.closing
            else:  # the space a cut between words falls after ends no part
                head = head.rstrip(" \t")
            current += head
            flush()
            current = opening = seam.opening
            since = start = seam.resume
    flush()
    return parts
