"""The terminal's input read so that a signal never passes it by.

A signal sent to the process (a SIGTERM, a closed window's SIGHUP, a Ctrl-C's SIGINT) is
delivered by the kernel to one of its threads, any that does not block it: usually the
main thread, but another one when it took the signal first (one starting a thread, which
unblocks signals, at that moment: more often on a loaded machine, where the main thread
waits for a processor). Python runs the handler on the main thread, the next time it runs
Python code; a main thread waiting in a read of its input is woken only when the signal
landed on it, so the terminal stayed until its input ended. Here the input is read from
its descriptor once `select` says something came, and the same `select` watches the
descriptor Python writes to at every signal (signal.set_wakeup_fd), whichever thread took
it: the wait ends, and the handler runs on the main thread. A message sent to a server
is waited for the same way (signal_ends_wait).
"""
from __future__ import annotations

import codecs
import io
import os
import select
import signal
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TextIO, TypeVar, cast

from .terminal_leave import leaving

T = TypeVar("T")


class SignalPipe:
    """Python's signal wake-up descriptor, ours while inside (`with` it, on the main
    thread): `fd` is readable once a signal came, whichever thread took it, or once
    `poke` was called (from any thread). The descriptor set before comes back after."""

    def __init__(self) -> None:
        self.fd = self._signals = self._before = -1
        self._open = threading.Lock()  # a poke never writes to a descriptor closed (and maybe reused)

    def __enter__(self) -> SignalPipe:
        self.fd, self._signals = os.pipe()
        for fd in (self.fd, self._signals):
            os.set_blocking(fd, False)  # Python's handler never waits to write; draining never waits
        self._before = signal.set_wakeup_fd(self._signals, warn_on_full_buffer=False)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        signal.set_wakeup_fd(self._before)
        with self._open:
            os.close(self.fd)
            os.close(self._signals)
            self.fd = self._signals = -1

    def poke(self) -> None:
        """Wakes the wait on `fd`, as a signal would; nothing once the pipe is closed."""
        with self._open:
            if self._signals < 0:
                return
            try:
                os.write(self._signals, b"\0")
            except BlockingIOError:  # full: the wait is woken already
                pass

    def drain(self) -> None:
        """Empties `fd`: a call, where Python runs the handler of a signal that came, if it
        has not yet."""
        try:
            while os.read(self.fd, 512):
                pass
        except BlockingIOError:
            pass


def signal_ends_wait(call: Callable[[], T], *, after_signal: Callable[[], None] = lambda: None) -> T:
    """`call()` (one that waits on the network: sending a message to a server), done on a
    thread of its own while the main thread waits for it beside the signals' descriptor.
    Done on the main thread, a SIGTERM or SIGHUP was noted and acted on only once the call
    had ended: with a server that took the request and never answered, when its timeout ran
    out (30 s). Noted while it runs, the main thread leaves at once (terminal_leave:
    SystemExit), the call left to end on its daemon thread, or to be cut short as the
    terminal closes its client. `after_signal()` is called on the main thread after each
    signal: what it raises ends the wait the same way (the person's Ctrl-C: leaving, or
    giving up on the server)."""
    outcome: list[Any] = []
    done = threading.Event()
    with SignalPipe() as wake:

        def run() -> None:
            try:
                outcome.append((True, call()))
            except BaseException as exc:  # raised again on the main thread, as if called there
                outcome.append((False, exc))
            finally:
                done.set()
                wake.poke()

        threading.Thread(target=run, name="qorven-chat-send", daemon=True).start()
        while not done.is_set():
            leaving.leave_if_signalled()
            after_signal()
            select.select([wake.fd], [], [])
            wake.drain()
    finished, result = outcome[0]
    if not finished:
        raise result
    return cast(T, result)


class InputLines:
    """The lines of `stdin` as they come (`with` it, on the main thread: a signal ends
    each wait for them while it lasts)."""

    def __init__(self, stdin: TextIO) -> None:
        self.fd = stdin.fileno()
        self._decoder = io.IncrementalNewlineDecoder(
            codecs.getincrementaldecoder(stdin.encoding or "utf-8")(stdin.errors or "strict"), translate=True)
        self._pending = ""
        self._signals = SignalPipe()
        self.ended = False  # the input has ended

    def __enter__(self) -> InputLines:
        self._signals.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._signals.__exit__(kind, exc, tb)

    def wait(self, *wake: int) -> bool:
        """Waits until input came (True: `take` it), a signal came (its handler has run
        here, on the way back from the wait, and raised nothing) or one of `wake` is
        readable. A SIGTERM or SIGHUP noted, before the wait or during it, leaves from
        here (terminal_leave): SystemExit."""
        leaving.leave_if_signalled()  # one that came before the wake-up descriptor was ours
        ready, _, _ = select.select([self.fd, self._signals.fd, *wake], [], [])
        if self._signals.fd in ready:
            self._signals.drain()  # a call, where Python runs the handler if it has not yet: before any input is read
            leaving.leave_if_signalled()
            return False
        return self.fd in ready

    def take(self) -> list[str]:
        """The lines that came (each with its "\\n"), once `wait` said some did; at the
        end of the input (`ended` from then on), its last line if it had no "\\n"."""
        chunk = os.read(self.fd, 65536)
        *lines, self._pending = (self._pending + self._decoder.decode(chunk, final=not chunk)).split("\n")
        taken = [line + "\n" for line in lines]
        if not chunk:
            self.ended = True
            if self._pending:
                taken.append(self._pending)
        return taken

    def __iter__(self) -> Iterator[str]:
        while not self.ended:
            if self.wait():
                yield from self.take()
