"""The prompt at the bottom of `qorven chat` on a terminal (prompt_toolkit), with the
streaming reply's unfinished line above it (channels_app.terminal_screen)."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .terminal_leave import leaving
from .terminal_paint import Painter, prompt_input

if TYPE_CHECKING:
    from .terminal_chat import TerminalChat

PROMPT = "you › "


class Prompt:
    """The prompt at the bottom of the terminal, with the streaming reply's unfinished
    line above it."""

    def __init__(self, chat: TerminalChat) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.key_binding import KeyBindings

        self.chat = chat
        self.again = ""  # a message that did not go, on the next prompt to send again
        keys = KeyBindings()

        @keys.add("c-c")
        def _interrupt(event: Any) -> None:
            typed = event.current_buffer
            action = chat.interrupt(typed.text)
            if action == "clear":
                typed.reset()
            elif action == "leave":
                event.app.exit(exception=EOFError())
            # "stop": what was typed stays; the reply ends marked (stopped)

        # The line typed is erased when sent: the timeline shows it as sent, once.
        self.session: Any = PromptSession(erase_when_done=True, key_bindings=keys, input=prompt_input(sys.stdin))
        self.painter = Painter(self.session.app.output)

    def message(self) -> Any:
        from prompt_toolkit.formatted_text import ANSI

        tail = self.painter.tail
        return ANSI(tail.expandtabs() + "\n" + PROMPT) if tail else PROMPT

    def lines(self) -> Iterator[str]:
        from prompt_toolkit.patch_stdout import patch_stdout

        # What else reaches stdout or stderr (a log line) goes above the prompt too, its
        # escapes shown, not obeyed; what the chat shows goes through the painter.
        # A SIGTERM or SIGHUP ends the prompt from its own loop, as Ctrl-D does, and the
        # terminal leaves once it has ended (terminal_leave). Left from the handler, in
        # whatever the loop was doing when the signal came (prompt_toolkit's in_terminal
        # between its steps, a paint), the loop could wait for ever on its way out: a closed
        # window's `qorven chat` stayed running, its terminal gone.
        with patch_stdout(), leaving.waking(self.leave):
            while not self.chat.lost.is_set():
                leaving.leave_if_signalled()  # one that came while a message was sent
                try:
                    # pre_run: access lost (or a signal) as this prompt starts (too late for the
                    # loop's check, too early for leave() to find it running) ends it all the same.
                    again, self.again = self.again, ""
                    self.chat.note_ctrl_c(afresh=True)  # a Ctrl-C right after Enter is about the message sent
                    typed = self.session.prompt(self.message, pre_run=self._started, default=again)
                except EOFError:
                    leaving.leave_if_signalled()
                    return
                finally:
                    self.painter.ended()
                leaving.leave_if_signalled()
                yield typed

    def _started(self) -> None:
        self.painter.started(self.session.app)
        if self.chat.lost.is_set() or leaving.signum is not None:
            self.session.app.exit(exception=EOFError())

    def leave(self) -> None:
        """From any thread, or a signal's handler (it takes no lock): end the prompt shown
        now, as Ctrl-D does."""
        loop = self.session.app.loop
        if loop is None:  # between prompts: the next one does not start
            return
        try:
            loop.call_soon_threadsafe(self._exit_running)
        except RuntimeError:  # that prompt's loop has just closed: likewise
            pass

    def _exit_running(self) -> None:
        app = self.session.app
        if app.is_running and app.future is not None and not app.future.done():
            app.exit(exception=EOFError())
