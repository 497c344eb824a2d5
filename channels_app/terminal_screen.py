"""`qorven chat` for a person (channels_app.terminal has the --json mode): the timeline,
replies streaming in, and what they type.

On a terminal the prompt stays at the bottom (prompt_toolkit) and everything shown goes
above it as whole lines. A prompt redraw rewrites its own rows, so text left on those rows
is written over: a reply's line still being written is therefore shown as part of the
prompt (the row above `you ›`), and printed above once it is complete — at a line break
of the reply, or at the terminal's width. Read from a pipe, lines are printed as they come.
"""
from __future__ import annotations

import re
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, TextIO

from tenancy.errors import NotFound

from .chat import ChatOwner
from .terminal import HumanPrinter, _follower, _send

PROMPT = "you › "
_SGR = re.compile(r"\x1b\[[0-9;]*m")  # our own colours: the only escapes in what is shown (terminal.shown)


class ScreenPrinter(HumanPrinter):
    """A HumanPrinter under a live prompt: a reply's unfinished line is `tail`, which the
    prompt shows (`redraw` asks it to); only whole lines are printed."""

    def __init__(self, out: TextIO, color: bool, *, redraw: Callable[[], None]) -> None:
        super().__init__(out, color)
        self.tail = ""
        self.redraw = redraw

    def _stream(self, text: str) -> None:
        *lines, self.tail = (self.tail + text).split("\n")
        while (cut := row_cut(self.tail, shutil.get_terminal_size().columns)) is not None:
            lines.append(cut[0])
            self.tail = cut[1]
        for line in lines:
            self._line(line)
        self.redraw()

    def _interrupt(self) -> None:
        """The reply's unfinished line stays where it is (on the prompt) and goes on; the
        other message is printed above it, and no word of the reply is cut in two."""

    def _end_stream(self) -> None:
        if self.streaming is not None:
            self.streaming = None
            tail, self.tail = self.tail, ""
            self._line(tail)
            self.redraw()


def row_cut(text: str, columns: int) -> tuple[str, str] | None:
    """`text` as (the row it fills, the rest) once it no longer fits a row of `columns`,
    cut at its last space (or, a word longer than the row, at the edge); None while it fits.
    The last column stays free: where the cursor goes after a row that fills it differs
    between terminals."""
    from prompt_toolkit.utils import get_cwidth

    width, space, i = 0, None, 0
    columns = max(columns, 20)
    while i < len(text):
        colour = _SGR.match(text, i)
        if colour:
            i = colour.end()
            continue
        char = text[i]
        if char == " ":
            space = i
        width += 8 - width % 8 if char == "\t" else max(get_cwidth(char), 0)
        if width >= columns:
            return (text[:space], text[space + 1:]) if space else (text[:i], text[i:])
        i += 1
    return None


class _CurrentStdout:
    """sys.stdout as it is at each write: prompt_toolkit's patch_stdout swaps it so what
    is printed goes above the prompt."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()

    def isatty(self) -> bool:
        return sys.stdout.isatty()


def run_interactive(owner: ChatOwner, *, history: int, link: Any = None) -> int:
    stdout: Any = _CurrentStdout()
    prompt = _Prompt() if sys.stdin.isatty() and stdout.isatty() else None
    printer = (ScreenPrinter(stdout, True, redraw=prompt.redraw) if prompt is not None
               else HumanPrinter(stdout, stdout.isatty()))
    if prompt is not None:
        prompt.printer = printer
    out_lock = threading.Lock()

    def emit(event: dict[str, Any]) -> None:
        with out_lock:
            printer(event)

    def notice(text: str) -> None:
        emit({"type": "message.new", "seq": 0, "role": "system", "content": text, "channel": "tui",
              "sender_name": "", "created_at": datetime.now().astimezone().isoformat()})

    title = f"{owner.qor.name} · {owner.tenant.slug} · {owner.user.get_username()}"
    stdout.write(printer._c("1", f"── {title} ──") + "\n")
    stdout.write(printer._c("2", "Messages from every channel appear here. /quit or Ctrl-D to leave.") + "\n")
    if link is not None:
        stdout.write(printer._c("2", f"Connected to the server at {link.base}.") + "\n")
    follower = _follower(owner, emit, link)
    follower.start(history=history)
    try:
        for line in prompt.lines() if prompt is not None else sys.stdin:
            text = line.rstrip("\n")
            if text.strip() in ("/quit", "/exit"):
                break
            if not text.strip():
                continue
            try:
                _send(owner, link, text)
            except NotFound as exc:  # removed from the workspace while the terminal was open
                notice(str(exc))
                break
            except ValueError as exc:
                notice(str(exc))
                continue
            with follower._lock:
                follower.catch_up()
    except (KeyboardInterrupt, EOFError):
        pass
    finally:
        follower.stop()
    return 0


class _Prompt:
    """The prompt at the bottom of the terminal, with the streaming reply's unfinished
    line above it."""

    def __init__(self) -> None:
        from prompt_toolkit import PromptSession

        self.printer: ScreenPrinter | None = None
        # The line typed is erased when sent: the timeline shows it as sent, once.
        self.session: Any = PromptSession(erase_when_done=True)

    def message(self) -> Any:
        from prompt_toolkit.formatted_text import ANSI

        tail = self.printer.tail if self.printer is not None else ""
        return ANSI(tail.expandtabs() + "\n" + PROMPT) if tail else PROMPT

    def redraw(self) -> None:
        self.session.app.invalidate()  # a no-op between prompts; safe from the follower's thread

    def lines(self) -> Iterator[str]:
        from prompt_toolkit.patch_stdout import patch_stdout

        with patch_stdout(raw=True):  # raw: our colours pass; shown() has made the rest harmless
            while True:
                try:
                    yield self.session.prompt(self.message)
                except EOFError:
                    return
