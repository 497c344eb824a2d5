"""A reply streaming in under `qorven chat`'s live prompt (channels_app.terminal_screen):
whole rows printed above it, the unfinished one shown on the prompt, and a reply taken back
taken off the screen."""
from __future__ import annotations

from typing import Any

from .terminal import HumanPrinter
from .terminal_paint import Painter
from .terminal_rows import CONTINUED, fold, hang, item_indent, row_cut, rows_of, visible


class ScreenPrinter(HumanPrinter):
    """A HumanPrinter under a live prompt: a reply's unfinished row is `tail` (`head`, the
    mark that begins the reply or the indent of a further row, then `body`), which the
    prompt shows; only whole rows are printed, wrapped as whole messages are (HumanPrinter).
    Each event's rows and the tail after them are shown together (Painter.show). The rows
    printed since a reply began streaming are remembered, so that a reply taken back (a
    thinking model's reasoning) is taken off the screen too."""

    def __init__(self, painter: Painter, color: bool) -> None:
        super().__init__(painter, color, columns=painter.columns)  # type: ignore[arg-type]  # a text stream: write, flush
        self.painter = painter
        self.head = self.body = ""
        self.under: int | None = None  # the indent of the reply's line's further rows, once it has one
        self.fenced = False  # the reply is in a code block
        self.code = False  # the reply's line, cut, is one of code or a table's (CONTINUED begins its further rows)
        self.opens = False  # the reply's line, cut, began with a fence
        self.drawn: list[tuple[str, bool]] = []  # since the reply began: each row printed, and whether it is the reply's

    @property
    def tail(self) -> str:
        """The reply's unfinished row, as the prompt shows it (nothing between its lines)."""
        return self.head + self.body if self.body or self.under is None and self.head.strip() else ""

    def _begin_stream(self, mark: str) -> None:
        self.head, self.body, self.under, self.fenced, self.code = mark, "", None, False, False

    def _stream(self, text: str) -> None:
        *lines, self.body = (self.body + text).split("\n")
        columns = self.painter.columns()
        for line in lines:  # complete lines of the reply
            fence = self.opens if self.under is not None else line.lstrip().startswith(FENCES)
            for row in self._rows(line, columns):
                self._print(row, reply=True)
            self.fenced ^= fence
            self.head, self.under, self.code = " " * hang(REPLY_INDENT, columns=columns), None, False
        code = self._whole(self.body)  # a row of code or a table's: cut at the edge, not between words
        while (cut := row_cut(self.head + self.body, columns, keep=len(visible(self.head)), code=code)) is not None:
            self._print(cut[0], reply=True)
            self._further(columns, code=code)
            self.body = cut[1]

    def _whole(self, line: str) -> bool:
        """Whether the reply's line (`line`, from its start while it has no further row) is
        one of a code block or a table: cut at the edge, not between words."""
        return self.fenced or self.code or self.under is None and line.lstrip().startswith((*FENCES, "|"))

    def _further(self, columns: int, *, code: bool = False) -> None:
        """The reply's line goes on on a further row: under its text (nearer the edge if the
        terminal has narrowed since); a line of `code` after CONTINUED."""
        if self.under is None:
            self.code, self.opens = code, self.body.lstrip().startswith(FENCES)
            self.under = hang(REPLY_INDENT + (0 if code else item_indent(self.body)), REPLY_INDENT, columns=columns)
        else:
            self.under = hang(self.under, REPLY_INDENT, columns=columns)
        self.head = " " * self.under + (CONTINUED if self.code else "")

    def _rows(self, line: str, columns: int) -> list[str]:
        """What is left of a line of the reply (`body` was its start), as rows."""
        code = self._whole(line)
        under = self.under if self.under is not None else hang(REPLY_INDENT + (0 if code else item_indent(line)),
                                                                  REPLY_INDENT, columns=columns)
        return [row.rstrip(" ") for row in fold(self.head + line, columns, indent=under,
                                                keep=len(visible(self.head)), code=code)]

    def __call__(self, event: dict[str, Any]) -> None:
        super().__call__(event)
        self.painter.show(self.tail)

    def _line(self, text: str) -> None:
        self._print(text, reply=False)

    def _print(self, text: str, *, reply: bool) -> None:
        if self.streaming is not None:
            self.drawn.append((text, reply))
        super()._line(text)

    def _restart(self) -> None:
        """Up to the reply's first row and clear from there (the prompt, drawn below what
        is printed, is drawn again after it), then print again the other messages shown
        meanwhile; the answer streams in the reply's place. Rows already scrolled off the
        screen cannot be reached: then they are said to be reasoning, as on a pipe."""
        size = self.painter.output.get_size()
        rows = sum(rows_of(text, size.columns) for text, _ in self.drawn)
        if rows > size.rows - RESERVED_ROWS:
            self.drawn.clear()
            self.body = ""
            super()._restart()
            return
        others = [text for text, reply in self.drawn if not reply]
        self.streaming, self.head, self.body = None, "", ""
        self.drawn.clear()
        self.out.write((f"\033[{rows}A" if rows else "") + "\r\033[J" + "".join(text + "\n" for text in others))

    def _interrupt(self) -> None:
        """The reply's unfinished row stays where it is (on the prompt) and goes on; the
        other message is printed above it, and no word of the reply is cut in two."""

    def _end_stream(self, *, stopped: bool = False) -> None:
        if self.streaming is not None:
            self.streaming = None
            self.drawn.clear()
            line, self.body = self.body + (self._stopped() if stopped else ""), ""
            if line or self.under is None and self.head.strip():  # not after the reply's last line break
                for row in self._rows(line, self.painter.columns()):
                    self._line(row)
            self.head = ""


# Rows of the screen a reply's lines must leave to be taken off it: the prompt's own (the
# reply's unfinished line, the line typed) and one to spare.
RESERVED_ROWS = 3
REPLY_INDENT = 2  # cells: a reply's further rows go under its text, after "… "
FENCES = ("```", "~~~")  # a line beginning with one opens or closes a code block
