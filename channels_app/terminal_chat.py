"""What a person at `qorven chat` sees and what Ctrl-C does, on a terminal or reading a
pipe (channels_app.terminal_screen runs it): the replies on their way, access lost
meanwhile, the lines read."""
from __future__ import annotations

import logging
import math
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
from .terminal import ACCESS_CHECK, HumanPrinter, Pending, _access_lost
from .terminal_follow import Follower
from .terminal_input import InputLines
from .terminal_leave import leaving
from .terminal_paint import RowPainter
from .terminal_prompt import Prompt
from .terminal_streaming import ScreenPrinter

logger = logging.getLogger(__name__)


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


AGAIN = 1.5  # seconds: a second Ctrl-C this soon after one leaves, unless told to press it again (_stop_refused)


class TerminalChat:
    """What the person sees and what Ctrl-C does, on a terminal or reading a pipe."""

    def __init__(self, owner: ChatOwner, link: Any, stdout: Any, *, on_screen: bool, color: bool | None) -> None:
        self.owner, self.link = owner, link
        self.prompt = Prompt(self) if on_screen else None
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
        self._sent_again = False  # the message on its way has been sent again (sending_again)

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
        self._sent_again = False
        try:
            yield
        finally:
            pressed, self._pressed = self._pressed, []
            self.release_ctrl_c()
            if any([self.interrupt("", sent=True) == "leave" for _ in pressed]):
                raise KeyboardInterrupt

    def sending_again(self, said: str) -> None:
        """`said`: the message on its way is sent again (its server busy, or not answering).
        From now on one Ctrl-C gives the line back (heed_ctrl_c_while_sending); one pressed
        before was about the reply, which has not begun."""
        self._pressed.clear()
        self._sent_again = True
        self.notice(f"{said} Ctrl-C gives the line back.")

    def heed_ctrl_c_while_sending(self) -> None:
        """After a signal while the message is on its way to a server: Ctrl-C twice leaves
        (KeyboardInterrupt) then, not once the server has answered or every try has run
        out; once, after the person was told it is being sent again, gives the line back
        (ValueError, our notice): they need not wait out the tries."""
        from .terminal_client import GAVE_UP_WAITING

        if len(self._pressed) >= 2:
            raise KeyboardInterrupt
        if self._pressed and self._sent_again:
            self._pressed.clear()
            raise ValueError(GAVE_UP_WAITING)

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
        the line typed, or "leave" at the empty prompt or on a second Ctrl-C in a row (not
        the one a refused Stop asked for: _stop_refused).
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
        from qorven.agent.stop import StopUnavailable

        from .terminal_client import ServerUnavailable

        try:
            asked = self.link.stop(reply_to) if self.link is not None else chat_stop(owner=self.owner,
                                                                                     reply_to=reply_to)
        except NotFound as exc:
            self.notice(str(exc))
            return
        except StopUnavailable as exc:  # the server's cache away: it could not pass the request on
            self._stop_refused("The reply could not be stopped just now", exc.retry_after)
            return
        except ServerUnavailable as exc:  # another 503: its database away, a proxy's
            self._stop_refused(f"The reply could not be stopped: {exc.reason}",
                               exc.retry_after)
            return
        except Exception:  # the server away: the reply goes on, and saying so is all we can do
            logger.debug("could not ask for the reply to %s to stop", reply_to, exc_info=True)
            self._stop_refused("The reply could not be stopped: the server did not answer", None)
            return
        finally:
            close_old_connections()
        if not asked:
            self.replies.forget(reply_to)

    def _stop_refused(self, why: str, retry_after: float | None) -> None:
        """Say why the Stop did not go, when to press Ctrl-C again and how to leave. The
        next Ctrl-C is that try, not the second press of a leave: pressed as told, within
        AGAIN of the first, it left the chat. (One pressed before this is said still leaves.)"""
        self.interrupted_at = -AGAIN
        when = f" in {math.ceil(retry_after)} s" if retry_after else ""
        self.notice(f"{why}. Press Ctrl-C to try again{when}; Ctrl-D or /quit leaves.")

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
