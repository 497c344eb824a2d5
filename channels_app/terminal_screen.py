"""`qorven chat` for a person (channels_app.terminal has the --json mode): the timeline,
replies streaming in, and what they type.

On a terminal the prompt stays at the bottom (prompt_toolkit) and everything shown goes
above it as whole lines. A prompt redraw rewrites its own rows, so text left on those rows
is written over: a reply's line still being written is therefore shown as part of the
prompt (the row above `you ›`), and printed above once it is complete — at a line break
of the reply, or at the terminal's width (channels_app.terminal_paint writes both, in
order). Reading a file or a pipe, a terminal shows the same with no prompt below
(terminal_paint.RowPainter); written to a file or a pipe, lines are printed as they come.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.db import close_old_connections

from tenancy.access import ACCESS_LOST_NOTICE
from tenancy.errors import NotFound

from .chat import ChatOwner, chat_stop
from .terminal import ACCESS_CHECK, ACCESS_LOST, GAVE_UP, HumanPrinter, Pending, _access_lost, _follower, _send
from .terminal_follow import Follower
from .terminal_input import InputLines
from .terminal_leave import leaving
from .terminal_paint import Painter, RowPainter, prompt_input
from .terminal_rows import CONTINUED, fold, hang, item_indent, row_cut, rows_of, visible

logger = logging.getLogger(__name__)

PROMPT = "you › "


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


class _CurrentStdout:
    """sys.stdout as it is at each write: prompt_toolkit's patch_stdout swaps it so what
    is printed goes above the prompt."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()

    def isatty(self) -> bool:
        return sys.stdout.isatty()


def run_interactive(owner: ChatOwner, *, history: int, link: Any = None, color: bool | None = None,
                    wait: float = 300.0, unanswered: str = "") -> int:
    """The terminal for a person, until they leave (0) or lose access to the workspace
    meanwhile (ACCESS_LOST, as --json: removed from it, or this terminal signed out).
    `color`: whether to colour what is shown (None: on a terminal, not on a pipe). Reading
    a pipe, at the end of its input it waits up to `wait` seconds for the replies to what
    it sent, as --json does (GAVE_UP when they did not all come). `unanswered`: the server
    address that did not answer, so this terminal works on the database alone (said once)."""
    stdout: Any = _CurrentStdout()
    chat = _Chat(owner, link, stdout, on_screen=sys.stdin.isatty() and stdout.isatty(), color=color)
    printer = chat.printer
    title = f"{owner.qor.name} · {owner.tenant.slug} · {owner.user.get_username()}"
    stdout.write(printer.rows("", f"── {title} ──", colour="1") + "\n")
    stdout.write(printer.rows("", "Messages from every channel appear here. Ctrl-C stops a reply; "
                                  "Ctrl-D or /quit leaves.", colour="2") + "\n")
    if link is not None:
        stdout.write(printer.rows("", f"Connected to the server at {link.base}.", colour="2") + "\n")
    elif unanswered:
        stdout.write(printer.rows("", f"No Qorven server answers at {unanswered}: working on the database alone "
                                      "(give the running server's address with --server URL for its pages to "
                                      "show this chat live)", colour="2") + "\n")
    follower = _follower(owner, chat.emit, link)
    follower.start(history=history)
    # Also while the person only reads or types: a prompt whose every message would be
    # refused is no terminal, and a script wrapping this one must see the end (exit 3).
    watching = threading.Thread(target=chat.watch_access, args=(follower,), name="qorven-chat-access", daemon=True)
    watching.start()
    try:
        for line in chat.prompt.lines() if chat.prompt is not None else chat.plain_lines():
            text = line.rstrip("\n")
            if text.strip() in ("/quit", "/exit"):
                break
            if not text.strip():
                continue
            with chat.sending():
                try:
                    seq, expects_reply = _send(owner, link, text, leave_if=chat.leaving_while_sending)
                except NotFound:  # removed from the workspace while the terminal was open
                    chat.lose_access()
                    break
                except ValueError as exc:  # refused, or the server did not answer: typed again, it can go
                    chat.notice(str(exc))
                    if chat.prompt is not None:
                        chat.prompt.again = text
                    continue
                if expects_reply:
                    chat.replies.expect(seq)
                    chat.pending.add(seq)
                with follower._lock:
                    follower.catch_up()
        chat.release_ctrl_c()  # the prompt's last (/quit, an empty line, Ctrl-D): Ctrl-C leaves the wait
        if chat.input_ended and not chat.replied(wait):
            return ACCESS_LOST if chat.lost.is_set() else GAVE_UP
    except (KeyboardInterrupt, EOFError):
        pass
    finally:
        chat.release_ctrl_c()
        chat.closed.set()
        watching.join(5)
        follower.stop()  # and with it the session's token
        with follower._lock:
            follower.catch_up()  # what came with the last reply's end (its stored message)
    return ACCESS_LOST if chat.lost.is_set() else 0


class OnItsWay:
    """The replies being written that this terminal knows of (to what it sent, and any
    streaming here): Ctrl-C stops the newest, as the page's Stop button does."""

    def __init__(self) -> None:
        self.seqs: set[int] = set()
        self.ended: set[int] = set()  # a reply can end before its message's seq is back from sending
        self.lock = threading.Lock()

    def expect(self, seq: int) -> None:
        with self.lock:
            if seq not in self.ended:
                self.seqs.add(seq)

    def see(self, event: dict[str, Any]) -> None:
        with self.lock:
            if event["type"] == "chunk" and event["reply_to"] not in self.ended:
                self.seqs.add(event["reply_to"])
            elif event["type"] == "done":
                self.ended.add(event["reply_to"])
                self.seqs.discard(event["reply_to"])

    def forget(self, seq: int) -> None:
        """The server says no answer to it is being written (it ended unseen, or failed)."""
        self.see({"type": "done", "reply_to": seq})

    def newest(self) -> int | None:
        with self.lock:
            return max(self.seqs, default=None)


AGAIN = 1.5  # seconds: a second Ctrl-C this soon after one leaves, whatever it found


class _Chat:
    """What the person sees and what Ctrl-C does, on a terminal or reading a pipe."""

    def __init__(self, owner: ChatOwner, link: Any, stdout: Any, *, on_screen: bool, color: bool | None) -> None:
        self.owner, self.link = owner, link
        self.prompt = _Prompt(self) if on_screen else None
        if color is None:
            color = on_screen or stdout.isatty()
        self.printer: HumanPrinter
        if self.prompt is not None:
            self.printer = ScreenPrinter(self.prompt.painter, color)
        elif stdout.isatty():  # reading a file or a pipe: wrapped to the terminal's width all the same
            self.printer = ScreenPrinter(RowPainter(stdout, sys.stdout.fileno()), color)  # type: ignore[arg-type]  # a Painter's part
        else:
            self.printer = HumanPrinter(stdout, color)
        self.replies = OnItsWay()
        self.pending = Pending()  # reading a pipe: what it waits for at the end of the input
        self.input_ended = False  # the pipe read has ended (not left with Ctrl-C or /quit)
        self.out_lock = threading.Lock()
        self.interrupted_at = -AGAIN
        self.lost = threading.Event()  # the person no longer has access to the workspace
        self.closed = threading.Event()  # the terminal is leaving
        self._losing = threading.Lock()
        # Written to wake plain_lines' wait for input when access is lost.
        self._wake_read, self._wake_write = os.pipe() if self.prompt is None else (-1, -1)
        self._pressed: list[int] = []  # Ctrl-Cs between two prompts, taken once the message is sent
        self._sigint_before: Any = None  # SIGINT's handler while they are noted (note_ctrl_c)

    def emit(self, event: dict[str, Any]) -> None:
        self.replies.see(event)
        self.pending.settle(event)
        with self.out_lock:
            self.printer(event)

    def notice(self, text: str) -> None:
        self.emit({"type": "message.new", "seq": 0, "role": "system", "content": text, "channel": "tui",
                   "sender_name": "", "created_at": datetime.now().astimezone().isoformat()})

    def replied(self, wait: float) -> bool:
        """Whether the replies to what was sent came, waiting up to `wait` seconds for them
        (not once access is lost)."""
        deadline = time.monotonic() + wait
        while not self.pending.empty():
            if self.lost.is_set() or time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
            leaving.leave_if_signalled()
        return True

    def watch_access(self, follower: Follower) -> None:
        """Every ACCESS_CHECK seconds, until the terminal leaves: whether the person may still
        use this chat (terminal._access_lost); when not, lose_access."""
        while not self.closed.wait(ACCESS_CHECK):
            try:
                lost = _access_lost(self.owner, follower, self.link)
            except Exception:  # the database away a moment: asked again next time
                logger.debug("could not check the terminal's access", exc_info=True)
                continue
            finally:
                close_old_connections()
            if lost:
                self.lose_access()
                return

    def lose_access(self) -> None:
        """From any thread: say once that the person no longer has access, and end the wait
        for what they type (the terminal then leaves with ACCESS_LOST)."""
        with self._losing:
            if self.lost.is_set():
                return
            self.lost.set()
        self.notice(ACCESS_LOST_NOTICE)
        if self.prompt is not None:
            self.prompt.leave()
        else:
            os.write(self._wake_write, b"x")

    @contextmanager
    def sending(self) -> Iterator[None]:
        """While a message is on its way, between two prompts (where the terminal turns
        Ctrl-C into SIGINT, not a key): a Ctrl-C is not raised in the middle of sending it,
        but taken once it is sent, as at the prompt — the reply to it stops; a second one
        leaves (KeyboardInterrupt)."""
        self.note_ctrl_c()
        try:
            yield
        finally:
            pressed, self._pressed = self._pressed, []
            self.release_ctrl_c()
            if any([self.interrupt("", sent=True) == "leave" for _ in pressed]):
                raise KeyboardInterrupt

    def leaving_while_sending(self) -> bool:
        """Whether Ctrl-C was pressed twice while the message is on its way: the person
        leaves then, not once the server has answered (or its 30 s have run out)."""
        return len(self._pressed) >= 2

    def note_ctrl_c(self, *, afresh: bool = False) -> None:
        """From now until release_ctrl_c, a SIGINT (a Ctrl-C where the terminal is not in
        the prompt's raw mode) is noted, not raised. Called as each prompt starts too, so a
        Ctrl-C pressed just after Enter — the prompt ended, the terminal in cooked mode
        again, the message not yet on its way — is one pressed while it is sent: it was
        raised where it landed, and the terminal left. (The prompt puts its own handler in
        place while it runs, and this one back after.) `afresh`: those noted before (after an
        empty line) are about nothing sent, and forgotten."""
        if afresh:
            self._pressed.clear()
        if threading.current_thread() is threading.main_thread() and self._sigint_before is None:
            self._sigint_before = signal.signal(signal.SIGINT, lambda number, frame: self._pressed.append(number))

    def release_ctrl_c(self) -> None:
        """SIGINT's handler as it was before note_ctrl_c (Ctrl-C leaves a pipe's reading)."""
        if self._sigint_before is not None:
            signal.signal(signal.SIGINT, self._sigint_before)
            self._sigint_before = None

    def interrupt(self, typed: str, *, sent: bool = False) -> str:
        """Ctrl-C: "stop" when a reply is being written (asked to stop here), else "clear"
        the line typed, or "leave" at the empty prompt or on a second Ctrl-C in a row.
        `sent`: pressed while a message was on its way, so about its reply: with none being
        written, nothing is left ("clear")."""
        now = time.monotonic()
        again, self.interrupted_at = now - self.interrupted_at < AGAIN, now
        reply_to = self.replies.newest()
        if again:
            return "leave"
        if reply_to is not None:
            # Off the prompt's thread: asking the server takes a round trip.
            threading.Thread(target=self._stop, args=(reply_to,), name="qorven-chat-stop", daemon=True).start()
            return "stop"
        return "clear" if typed or sent else "leave"

    def _stop(self, reply_to: int) -> None:
        try:
            asked = self.link.stop(reply_to) if self.link is not None else chat_stop(owner=self.owner,
                                                                                     reply_to=reply_to)
        except NotFound as exc:
            self.notice(str(exc))
            return
        except Exception:  # the server away: the reply goes on, and saying so is all we can do
            logger.debug("could not ask for the reply to %s to stop", reply_to, exc_info=True)
            self.notice("The reply could not be stopped: the server did not answer. Try Ctrl-C again.")
            return
        finally:
            close_old_connections()
        if not asked:
            self.replies.forget(reply_to)

    def plain_lines(self) -> Iterator[str]:
        """Lines read from a pipe or a terminal without the prompt (stdout redirected), until
        the input ends or access is lost. Read from the descriptor, beside the wake-up pipe
        and the signals' (terminal_input): a wait in sys.stdin.readline() could not be
        ended, a thread left reading there holds stdin's lock, which the interpreter's exit
        then waits for, and a signal another thread took went unheeded."""
        with InputLines(sys.stdin) as stdin:
            while not self.lost.is_set():
                try:
                    came = stdin.wait(self._wake_read)
                except KeyboardInterrupt:  # only while waiting for a line: nothing is half done
                    if self.interrupt("") == "stop":
                        continue
                    return
                if came:
                    yield from stdin.take()
                    if stdin.ended:
                        self.input_ended = True
                        return


class _Prompt:
    """The prompt at the bottom of the terminal, with the streaming reply's unfinished
    line above it."""

    def __init__(self, chat: _Chat) -> None:
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
