"""A SIGTERM (a supervisor, `timeout`, a closed pipeline) or a SIGHUP (the terminal's window
closed, the SSH connection lost) ends `qorven chat` as leaving does — signed out, the
follower stopped — with exit code 128 + the signal.

Python runs a signal's handler on the main thread between two steps of whatever it was
doing: inside a lock's acquire, a thread's start, a write, the interpreter's wait for the
threads still finishing a reply. A handler that did the leaving itself (it started the
sign-out's thread and raised SystemExit there) could be entered again by a second signal
come meanwhile: a second thread's start waited for ever on the lock the first had taken,
and the second SystemExit cut short the clean-up the first had begun. So the handler only
notes the first signal and wakes what waits for the person (the input's `select`, which
watches Python's wake-up descriptor: terminal_input; the prompt's loop: `waking`), and the
main thread leaves where that is safe (`leave_if_signalled`): between two lines read,
between two looks at the replies still to come, once the prompt has ended.
"""
from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Leaving:
    """The signal that ends the terminal, noted by its handler, acted on by the main thread."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the first SIGTERM or SIGHUP that came
        self._on_leave: Callable[[], None] | None = None
        self._wake: Callable[[], None] | None = None

    def install(self, *, on_leave: Callable[[], None] | None = None) -> None:
        """From the main thread: SIGTERM and SIGHUP are noted from now on; `on_leave` (the
        sign-out) runs on the main thread as it leaves."""
        self._on_leave = on_leave
        for signum in SIGNALS:
            signal.signal(signum, self.noted)

    def noted(self, signum: int, frame: FrameType | None) -> None:
        """The handler: notes the first signal (a second changes nothing) and wakes the wait
        in progress. Takes no lock and starts no thread."""
        if self.signum is None:
            self.signum = signum
        wake = self._wake
        if wake is not None:
            wake()

    @contextmanager
    def waking(self, wake: Callable[[], None]) -> Iterator[None]:
        """While inside, a signal also calls `wake`, from its handler: it must take no lock
        (asyncio's call_soon_threadsafe takes none)."""
        before, self._wake = self._wake, wake
        try:
            yield
        finally:
            self._wake = before

    def leave_if_signalled(self) -> None:
        """On the main thread, where leaving is safe: when a signal came, sign out (once)
        and raise SystemExit(128 + the signal) through the clean-up of whatever runs."""
        if self.signum is None:
            return
        on_leave, self._on_leave = self._on_leave, None
        if on_leave is not None:
            try:
                on_leave()
            except Exception:  # the clean-up signs out again on the way out
                logger.debug("could not sign the terminal out at once", exc_info=True)
        raise SystemExit(128 + self.signum)


# Signals are the process's, and so is this: the `qorven chat` command installs it.
leaving = Leaving()
