"""`qorven chat`: the terminal surface (channel `tui`); its --json mode here, the mode for a
person in channels_app.terminal_screen.

It works against the configured database like any management command, with or without
a server running. What the person types is stored through the same path as the web page
(channels_app.chat.chat_send); without a broker, the turn that answers runs on this
process's in-process task queue, so the reply streams here through the in-process layer.

A follower thread (channels_app.terminal_follow) watches the chat: through the channel layer (with REDIS_URL this sees
every process's events, other surfaces included) and by following seq in the database
(the only way to see another process's messages on the embedded default, and the safety
net for dropped events with Redis). Every message is shown once, in seq order.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from collections.abc import Iterable
from typing import Any, Callable, TextIO

from django.conf import settings

from tenancy.access import surface_access
from tenancy.errors import NotFound

from .chat import ChatOwner, chat_send
from .terminal_follow import Emit, Follower
from .terminal_input import InputLines, signal_ends_wait
from .terminal_leave import leaving
from .terminal_rows import fold, hang, item_indent, width_of


TAKEN_BACK = "── the text above was the model's reasoning, not its answer ──"


def json_line(event: dict[str, Any]) -> dict[str, Any]:
    """The --json shape of an output: message / notice / chunk / restart / done / session."""
    kind = event["type"]
    if kind == "message.new":
        keys = ("seq", "role", "content", "channel", "sender_name", "created_at", "reply_to")
        out = {"type": "notice" if event["role"] == "system" else "message", **{k: event.get(k) for k in keys}}
        if event.get("notice"):
            out["notice"] = event["notice"]
        return out
    return event


# Control characters as their visible pictures (␛, ␇, ␍ …; C1 controls as �): text from
# other people and from the model is printed raw to the owner's terminal (patch_stdout(raw=True)
# keeps our colours), where ESC, CSI or OSC sequences would be obeyed — clearing the screen,
# retitling the window, moving the cursor over a line to forge it, writing the clipboard.
_SHOWN = {c: 0x2400 + c for c in range(0x20) if chr(c) not in "\t\n"} | {0x7F: 0x2421} | dict.fromkeys(range(0x80, 0xA0), 0xFFFD)


def shown(text: str) -> str:
    """`text` safe to print: line breaks kept (CRLF as one), every other control character
    shown, not obeyed."""
    return text.replace("\r\n", "\n").translate(_SHOWN)


class HumanPrinter:
    """Lines like `12:01 [telegram] Priya: hello`; replies stream in as they arrive.

    Given the terminal's width (`columns`, read at each message, so a resized terminal
    gets rows of its new width), a message is wrapped between words, its further rows under
    its text, as chat clients do; a terminal left to wrap it cuts words at its edge and
    runs them on at the first column, under the time. A line of a code block or a table
    is cut at the edge instead, its spaces kept, and goes on after CONTINUED (terminal_rows):
    wrapped between words, it would read as lines of code it is not.
    Without it (a pipe, a file) lines are written as they are."""

    def __init__(self, out: TextIO, color: bool, own_channel: str = "tui",
                 columns: Callable[[], int] | None = None) -> None:
        self.out, self.color, self.own, self.columns = out, color, own_channel, columns
        self.streaming: int | None = None

    def _c(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "chunk":
            if self.streaming != event["reply_to"]:
                self._end_stream()
                self.streaming = event["reply_to"]
                self._begin_stream(self._c("1;36", "…") + " ")
            self._stream(shown(event["delta"]))
            return
        if kind == "done":
            return
        if kind == "restart":  # what streamed was not the answer: the reply starts afresh
            if self.streaming == event["reply_to"]:
                self._restart()
            return
        if kind == "session":
            self._end_stream()
            self._line(self.rows("", "── a new conversation starts here ──", colour="2"))
            return
        if event.get("streamed") and self.streaming == event.get("reply_to"):
            self._end_stream(stopped=bool(event.get("stopped")))  # the text is on screen already
            return
        self._interrupt()
        prefix, content, suffix, colour = self._parts(event)
        self._line(self.rows(prefix, content, suffix, colour=colour))

    def _begin_stream(self, mark: str) -> None:
        """A reply starts streaming: `mark` begins it."""
        self._stream(mark)

    def _interrupt(self) -> None:
        """Another message is shown while a reply streams: it goes on the next line."""
        self._end_stream()

    def _stream(self, text: str) -> None:
        """Part of a reply, on the line it is writing."""
        self.out.write(text)
        self.out.flush()

    def _line(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def _restart(self) -> None:
        """The reply streaming was not the answer (a thinking model's reasoning): what is
        printed stays printed, so it is said to be no part of the answer, which streams
        again on a line of its own."""
        self._end_stream()
        self._line(self.rows("", TAKEN_BACK, colour="2"))

    def _end_stream(self, *, stopped: bool = False) -> None:
        if self.streaming is not None:
            self.streaming = None
            self._line(self._stopped() if stopped else "")

    def _stopped(self) -> str:
        """After a reply the person stopped part-way, as the page marks it."""
        return " " + self._c("33", "(stopped)")

    def _parts(self, event: dict[str, Any]) -> tuple[str, str, str, str]:
        """(who and when, the text, what follows it, the text's colour)."""
        stamp = datetime.fromisoformat(event["created_at"]).astimezone().strftime("%H:%M")
        tag = f"[{event['channel']}] " if event["channel"] != self.own else ""
        content = shown(event["content"])
        if event["role"] == "system":
            return self._c("33", f"{stamp} {tag}! "), content, "", "33"
        who = shown(event["sender_name"] or event["role"])
        colour = "1;36" if event["role"] == "assistant" else "1;32"
        stopped = self._stopped() if event.get("stopped") else ""
        return f"{self._c('2', stamp)} {self._c('35', tag) if tag else ''}{self._c(colour, who)}: ", content, stopped, ""

    def rows(self, prefix: str, content: str, suffix: str = "", *, colour: str = "") -> str:
        """`prefix`, then `content` (in `colour`) and `suffix`, as printed: wrapped to the
        terminal's width when there is one (see the class), each line's further rows under
        its text (a list item's under the item's text)."""
        paint = (lambda text: self._c(colour, text)) if colour else (lambda text: text)
        if self.columns is None:
            return prefix + paint(content) + suffix
        lines = content.split("\n")
        columns = self.columns()
        under = hang(width_of(prefix), columns=columns)
        rows: list[str] = []
        fenced = False
        for n, line in enumerate(lines):
            head = prefix if n == 0 else " " * under
            end = suffix if n == len(lines) - 1 else ""
            fence = line.lstrip().startswith(("```", "~~~"))
            if fenced or fence or line.lstrip().startswith("|"):
                rows.extend(fold(head + paint(line) + end, columns, indent=under, keep=len(head) if n else 0,
                                 code=True))
            else:
                further = hang(under + item_indent(line), under, columns=columns)
                rows.extend(fold(head + paint(line) + end, columns, indent=further, keep=len(head) if n else 0))
            fenced ^= fence
        return "\n".join(row.rstrip(" ") for row in rows)


# --- the two modes ---


@dataclass
class Pending:
    """User messages sent from here that still wait for their answer. One is settled by
    its answer's `done` (the end of the reply's stream), or a moment (GRACE seconds) after
    the answer itself when no `done` follows: a reply that was not streamed, or a dropped
    event. So `--json` output ends after each reply's `done` when there is one."""

    GRACE = 2.0
    seqs: set[int] = field(default_factory=set)
    answered: dict[int, float] = field(default_factory=dict)  # seq → when its answer came
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, seq: int) -> None:
        with self.lock:
            self.seqs.add(seq)

    def settle(self, event: dict[str, Any]) -> None:
        with self.lock:
            if event["type"] == "done":
                self.seqs.discard(event["reply_to"])
            elif event["type"] == "message.new" and event["role"] in ("assistant", "system"):
                reply_to = event.get("reply_to")
                if reply_to in self.seqs:
                    self.answered.setdefault(reply_to, time.monotonic())

    def empty(self) -> bool:
        now = time.monotonic()
        with self.lock:
            return all(now - self.answered.get(seq, now + 1) >= self.GRACE for seq in self.seqs)


def _follower(owner: ChatOwner, emit: Emit, link: Any) -> Follower:
    """Following the chat through a running server (`link`, channels_app.terminal_client)
    or, with none, through this process's channel layer and the database."""
    if link is None:
        return Follower(owner, emit, poll_every=_poll_every())
    from .terminal_client import SocketFollower

    return SocketFollower(owner, emit, link=link)


def _send(owner: ChatOwner, link: Any, content: str, *, after_signal: Callable[[], None] = lambda: None,
          waiting: Callable[[str], None] = lambda said: None) -> tuple[int, bool]:
    """Send what the person typed on channel tui; (its seq, whether a reply will follow).
    `after_signal`: called after each signal while a server is waited for; what it raises
    ends the wait, and the server is sent no more tries. `waiting`: told, in words of ours,
    when the message is sent again (the server busy, or not answering)."""
    if link is not None:
        stop = threading.Event()
        try:
            # A signal ends the wait for a server that took the message and does not answer.
            sent = signal_ends_wait(lambda: link.send(content, waiting=waiting, stop=stop), after_signal=after_signal)
        except BaseException:
            stop.set()  # the wait ended here: the send's thread, left to finish its try, sends no more
            raise
        return sent.seq, sent.expects_reply
    result = chat_send(owner=owner, content=content, channel="tui")
    return result.message.seq, "command" not in (result.message.metadata or {})


# What leaves the terminal, typed alone on a line (--json: as a line's "content"): never sent.
LEAVE = ("/quit", "/exit")
GAVE_UP = 1  # exit code: the input ended and a reply did not come within --wait
ACCESS_LOST = 3  # exit code: the person was removed from the workspace (or signed out) meanwhile
LINE_SHAPE = 'each line must be an object like {"content": "…"}'
ACCESS_LOST_LINE = {"type": "error", "error": "you no longer have access to this workspace", "code": "access_lost"}
ACCESS_CHECK = 1.0  # seconds between looks at the membership (--json: while waiting for replies)


def _access_lost(owner: ChatOwner, follower: Follower, link: Any = None) -> bool:
    """Whether the person may no longer read this chat: the server signed this terminal out
    or would refuse its token now (revoked), or the membership no longer allows the
    terminal (the one access rule, read now)."""
    if follower.signed_out.is_set() or (link is not None and not link.signed_in()):
        return True
    return surface_access(tenant=owner.tenant, user=owner.user, surface=owner.surface) is None


def run_json(owner: ChatOwner, stdin: TextIO, stdout: TextIO, *, history: int, wait: float,
             link: Any = None) -> int:
    """Newline-delimited JSON: `{"content": "…"}` in, one event object a line out. At the
    end of input, waits (up to `wait` seconds) for the answers to what was sent; a line
    whose content is /quit or /exit leaves at once (0), sending nothing."""
    write_lock = threading.Lock()
    pending = Pending()

    def emit(event: dict[str, Any]) -> None:
        pending.settle(event)
        line = json.dumps(json_line(event), ensure_ascii=False)
        with write_lock:
            stdout.write(line + "\n")
            stdout.flush()

    follower = _follower(owner, emit, link)
    follower.start(history=history)
    try:
        with InputLines(stdin) as lines:  # a signal ends the wait for a line, on whichever thread it landed
            return _json_lines(owner, lines, stdout, write_lock, pending, follower, link=link, wait=wait)
    finally:
        # Also on Ctrl-C or a SIGTERM (qorven chat turns it into SystemExit): the follower
        # ends, and with it the session's token, which would otherwise work for half an hour.
        follower.stop()


def _json_lines(owner: ChatOwner, lines: Iterable[str], stdout: TextIO, write_lock: threading.Lock,
                pending: Pending, follower: Follower, *, link: Any, wait: float) -> int:
    for number, raw in enumerate(lines, start=1):
        raw = raw.strip()
        if not raw:
            continue
        try:
            try:
                body = json.loads(raw)
            except json.JSONDecodeError:
                # The parser's own words ("Expecting value: line 1 column 1 (char 0)") name
                # neither the input's line nor what it should be.
                raise ValueError(f"line {number} is not JSON: {LINE_SHAPE}") from None
            content = body.get("content") if isinstance(body, dict) else None
            if not isinstance(content, str):
                raise ValueError(LINE_SHAPE)
            if content.strip() in LEAVE:  # as at the terminal's prompt: at once, not waiting for replies
                return 0
            seq, expects_reply = _send(owner, link, content,
                                       waiting=lambda said: _say_notice(stdout, write_lock, said))
        except NotFound:  # removed from the workspace while the terminal was open
            return _say_access_lost(stdout, write_lock)
        except (ValueError, KeyError) as exc:
            with write_lock:
                stdout.write(json.dumps({"type": "error", "error": str(exc)}) + "\n")
                stdout.flush()
            continue
        if expects_reply:
            pending.add(seq)
        with follower._lock:
            follower.catch_up()  # the sent message, and a command's answer, in order
    deadline = time.monotonic() + wait
    checked = time.monotonic()
    while not pending.empty() and time.monotonic() < deadline:
        # A reply to someone removed meanwhile never comes (the turn does not answer them,
        # and a server closes their socket): say so, rather than wait out --wait.
        if time.monotonic() - checked >= ACCESS_CHECK:
            checked = time.monotonic()
            if _access_lost(owner, follower, link):
                return _say_access_lost(stdout, write_lock)
        time.sleep(0.05)
        leaving.leave_if_signalled()
    follower.stop()
    with follower._lock:
        follower.catch_up()
    return 0 if pending.empty() else GAVE_UP


def _say_notice(stdout: TextIO, write_lock: threading.Lock, text: str) -> None:
    """A notice of ours (a server asked for time: when the message goes again), as the
    timeline's notices are written."""
    event = {"type": "message.new", "seq": 0, "role": "system", "content": text, "channel": "tui",
             "sender_name": "", "created_at": datetime.now().astimezone().isoformat()}
    with write_lock:
        stdout.write(json.dumps(json_line(event), ensure_ascii=False) + "\n")
        stdout.flush()


def _say_access_lost(stdout: TextIO, write_lock: threading.Lock) -> int:
    with write_lock:
        stdout.write(json.dumps(ACCESS_LOST_LINE) + "\n")
        stdout.flush()
    return ACCESS_LOST


def _poll_every() -> float:
    # Without Redis, other processes' messages are only visible in the database.
    return 5.0 if settings.REDIS_URL else 1.0
