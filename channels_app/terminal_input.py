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
it: the wait ends, and the handler runs on the main thread.
"""
from __future__ import annotations

import codecs
import io
import os
import select
import signal
from collections.abc import Iterator
from types import TracebackType
from typing import TextIO

from .terminal_leave import leaving


class InputLines:
    """The lines of `stdin` as they come (`with` it, on the main thread: a signal ends
    each wait for them while it lasts)."""

    def __init__(self, stdin: TextIO) -> None:
        self.fd = stdin.fileno()
        self._decoder = io.IncrementalNewlineDecoder(
            codecs.getincrementaldecoder(stdin.encoding or "utf-8")(stdin.errors or "strict"), translate=True)
        self._pending = ""
        self._signalled = self._signals = -1
        self._before = -1
        self.ended = False  # the input has ended

    def __enter__(self) -> InputLines:
        self._signalled, self._signals = os.pipe()
        for fd in (self._signalled, self._signals):
            os.set_blocking(fd, False)  # Python's handler never waits to write; draining never waits
        self._before = signal.set_wakeup_fd(self._signals, warn_on_full_buffer=False)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        signal.set_wakeup_fd(self._before)
        os.close(self._signalled)
        os.close(self._signals)

    def wait(self, *wake: int) -> bool:
        """Waits until input came (True: `take` it), a signal came (its handler has run
        here, on the way back from the wait, and raised nothing) or one of `wake` is
        readable. A SIGTERM or SIGHUP noted, before the wait or during it, leaves from
        here (terminal_leave): SystemExit."""
        leaving.leave_if_signalled()  # one that came before the wake-up descriptor was ours
        ready, _, _ = select.select([self.fd, self._signalled, *wake], [], [])
        if self._signalled in ready:
            self._drain()  # a call, where Python runs the handler if it has not yet: before any input is read
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

    def _drain(self) -> None:
        try:
            while os.read(self._signalled, 512):
                pass
        except BlockingIOError:
            pass
