"""What `qorven chat`'s terminal is while text is written above its prompt: a real
pseudo-terminal, prompt_toolkit's own prompt on it, and the painter writing a line."""
from __future__ import annotations

import os
import pty
import termios
import threading

from prompt_toolkit import PromptSession
from prompt_toolkit.output.vt100 import Vt100_Output

from channels_app.terminal_paint import Painter, prompt_input


def test_the_terminal_stays_raw_while_a_line_is_written_above_the_prompt():
    """A key typed while a reply's line is written reaches the prompt: in cooked mode the
    terminal took Ctrl-D for the end of a line, Ctrl-Z and Ctrl-\\ for signals, and echoed
    letters where the cursor was."""
    master, slave = pty.openpty()
    modes: list[int] = []

    class Terminal(Vt100_Output):
        def write_raw(self, data: str) -> None:
            if "a reply's line" in data:
                modes.append(termios.tcgetattr(slave)[3])
            super().write_raw(data)

    def read_what_is_shown() -> None:
        try:
            while os.read(master, 65536):
                pass
        except OSError:  # closed
            pass

    reader = threading.Thread(target=read_what_is_shown, daemon=True)
    reader.start()
    with os.fdopen(slave, "r", closefd=False) as keys, os.fdopen(os.dup(slave), "w") as shown:
        output = Terminal.from_pty(shown)
        session = PromptSession(input=prompt_input(keys), output=output)
        painter = Painter(output)

        def started() -> None:
            painter.started(session.app)
            painter.write("a reply's line\n")
            painter.show("")
            session.app.loop.call_later(0.5, lambda: session.app.exit(result="left"))

        try:
            assert session.prompt("you › ", pre_run=started) == "left"
        finally:
            painter.ended()
    os.close(slave)
    os.close(master)
    assert len(modes) == 1
    assert modes[0] & (termios.ICANON | termios.ECHO | termios.ISIG) == 0
