"""What `qorven chat` shows on a terminal under its live prompt (channels_app.terminal_screen),
written to the terminal in the order it was shown.

Whole lines are printed above the prompt; a reply's unfinished line (the tail) is drawn by
the prompt itself. The two must change together: a tail drawn before the lines printed
ahead of it reads as those lines gone (a reply's last line, the line saying the text above
was reasoning), and text written while the prompt draws itself lands on the prompt's rows,
which its next draw wipes. So what is shown — the lines, then the tail after them — waits
here until it is written whole: while a prompt runs, by its own event loop, between an erase
of the prompt and its redraw (prompt_toolkit's in_terminal), in order; with no prompt
running, at once. (prompt_toolkit's patch_stdout writes from a thread of its own, up to
0.2 s after the prompt has redrawn, and straight to the terminal when it finds no prompt,
though one may be starting.)
"""
from __future__ import annotations

import asyncio
import os
import shutil
import threading
from typing import Any


class _Staged:
    """What a painter shares: text written by the printer waits (staged) until show()."""

    output: Any  # with get_size(): the terminal's size

    def __init__(self) -> None:
        self.tail = ""
        self._lock = threading.Lock()
        self._staged = ""

    def columns(self) -> int:
        """The terminal's width now."""
        return int(self.output.get_size().columns)

    def write(self, text: str) -> int:
        with self._lock:
            self._staged += text
        return len(text)

    def flush(self) -> None:
        """Nothing: what is written is shown with the tail that follows it (show)."""


class Painter(_Staged):
    """The terminal's text above the prompt, and the tail the prompt draws (`tail`)."""

    def __init__(self, output: Any) -> None:
        super().__init__()  # tail: the tail drawn, the prompt reads it at each draw
        self.output = output  # prompt_toolkit's Output: the prompt's own terminal
        self._text = ""  # shown, not yet on the terminal
        self._next_tail = ""  # the tail to draw once _text is on the terminal
        self._app: Any = None  # the prompt, while it runs
        self._loop: asyncio.AbstractEventLoop | None = None
        self._painting = False

    def show(self, tail: str) -> None:
        """From any thread: what was written since, then `tail` drawn by the prompt."""
        with self._lock:
            self._text += self._staged
            self._staged, self._next_tail = "", tail
            if self._app is None:
                self._write()
                return
            loop, context = self._loop, self._app.context
        try:
            # In the prompt's context: in_terminal finds the prompt there.
            loop.call_soon_threadsafe(self._paint_soon, context=context)  # type: ignore[union-attr]
        except RuntimeError:  # the prompt's loop has just closed: ended() writes it
            pass

    def started(self, app: Any) -> None:
        """On the prompt's loop before its first draw (its pre_run): what waits is written
        now, and from now on by the loop."""
        with self._lock:
            self._write()
            self._app, self._loop = app, app.loop
            self._painting = False

    def ended(self) -> None:
        """After the prompt has ended (and erased itself): what it left is written now."""
        with self._lock:
            self._app = self._loop = None
            self._write()

    def _write(self) -> None:
        """Holding the lock, with the prompt not drawn."""
        self.tail = self._next_tail
        if self._text:
            text, self._text = self._text, ""
            self.output.enable_autowrap()
            self.output.write_raw(text)  # raw: our colours pass; terminal.shown() made the rest harmless
            self.output.flush()

    def _paint_soon(self) -> None:
        if self._app is not None and not self._painting:
            self._painting = True
            self._app.create_background_task(self._paint(self._app))

    async def _paint(self, app: Any) -> None:
        from prompt_toolkit.application import in_terminal

        try:
            while True:
                with self._lock:
                    if self._app is not app:
                        return
                    if not self._text:  # only the tail changed: the prompt draws it
                        if self.tail != self._next_tail:
                            self.tail = self._next_tail
                            app.invalidate()
                        return
                # Cancelled in this wait (the prompt ending), the text stays for ended().
                async with in_terminal():
                    with self._lock:
                        self._write()
        finally:
            self._painting = False


def prompt_input(stdin: Any) -> Any:
    """The prompt's input from the terminal `stdin`, which stays in raw mode, and read,
    while text is written above the prompt.

    prompt_toolkit writes there between an erase of the prompt and its redraw (in_terminal:
    every paint of a Painter, and patch_stdout's writes), and meanwhile puts the terminal
    back in cooked mode with the input let go, as a program run in the terminal needs. A key
    typed in that moment was then the terminal's own: Ctrl-D ended a line of nothing (the
    chat stayed open), Ctrl-Z stopped the chat and Ctrl-\\ killed it, and letters were
    echoed where the cursor was. Nothing runs in this terminal but the prompt."""
    from contextlib import nullcontext

    from prompt_toolkit.input.vt100 import Vt100Input

    class KeysKept(Vt100Input):
        def detach(self) -> Any:
            return nullcontext()

        def cooked_mode(self) -> Any:
            return nullcontext()

    return KeysKept(stdin)


class RowPainter(_Staged):
    """A terminal with no prompt below what is shown (`qorven chat < questions.txt`): the
    lines are written as they come, and the tail on the row after them, written over as it
    grows (it always fits its row: channels_app.terminal_streaming.ScreenPrinter cuts it)."""

    def __init__(self, out: Any, fd: int) -> None:
        super().__init__()
        self.out, self.fd = out, fd  # fd: the terminal's
        self.output = self  # as Painter's: the terminal's size

    def get_size(self) -> Any:
        from prompt_toolkit.data_structures import Size

        # Asked of the terminal itself, as the prompt does: a COLUMNS in the environment
        # (shutil's first choice) is the width when it was set, not after a resize.
        try:
            size = os.get_terminal_size(self.fd)
        except OSError:
            size = shutil.get_terminal_size()
        return Size(rows=size.lines or 24, columns=size.columns or 80)

    def show(self, tail: str) -> None:
        """What was written since, over the tail shown until now, then `tail`."""
        with self._lock:
            text, self._staged = self._staged, ""
            if text or tail != self.tail:
                self.out.write("\r\033[K" + text + tail)
                self.out.flush()
            self.tail = tail
