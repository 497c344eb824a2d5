"""`qorven chat` for a person (channels_app.terminal has the --json mode): the timeline,
replies streaming in, and what they type.

On a terminal the prompt stays at the bottom (prompt_toolkit) and everything shown goes
above it as whole lines. A prompt redraw rewrites its own rows, so text left on those rows
is written over: a reply's line still being written is therefore shown as part of the
prompt (the row above `you ›`), and printed above once it is complete — at a line break
of the reply, or at the terminal's width (channels_app.terminal_paint writes both, in
order). Reading a file or a pipe, a terminal shows the same with no prompt below
(terminal_paint.RowPainter); written to a file or a pipe, lines are printed as they come.

Here the terminal is run; its parts are terminal_chat (what the person sees and what Ctrl-C
does), terminal_prompt (the prompt at the bottom) and terminal_streaming (a reply's rows).
"""
from __future__ import annotations

import sys
import threading
from typing import Any

from tenancy.errors import NotFound

from .chat import ChatOwner
from .terminal import ACCESS_LOST, GAVE_UP, LEAVE, _follower, _send
from .terminal_chat import TerminalChat


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
    chat = TerminalChat(owner, link, stdout, on_screen=sys.stdin.isatty() and stdout.isatty(), color=color)
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
            if text.strip() in LEAVE:
                break
            if not text.strip():
                continue
            with chat.sending():
                try:
                    seq, expects_reply = _send(owner, link, text, after_signal=chat.heed_ctrl_c_while_sending,
                                               waiting=chat.sending_again)
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
