"""One log line for a failure that repeats itself, not one per try.

Redis away for ten seconds while a reply streams fails every chunk twice (its stream
buffer, its broadcast): hundreds of warnings with a traceback each, the lines around them
lost. A `RepeatedFailure` logs the first failure with its traceback, then at most one
line a minute saying how many more there were, and one line when the next try succeeds.
"""
from __future__ import annotations

import logging
import threading
import time

REPEAT_EVERY = 60.0  # seconds between the lines of a failure that goes on


class RepeatedFailure:
    def __init__(self, logger: logging.Logger, what: str) -> None:
        self.logger = logger
        self.what = what  # "could not broadcast live events", as the log line says it
        self._lock = threading.Lock()
        self._failed = 0  # since the last line
        self._since: float | None = None  # when this run of failures began
        self._said = 0.0

    def failed(self, detail: str) -> None:
        """Call from an `except` block: logged with the traceback the first time."""
        now = time.monotonic()
        with self._lock:
            first = self._since is None
            if first:
                self._since, self._said, self._failed = now, now, 0
            elif now - self._said < REPEAT_EVERY:
                self._failed += 1
                return
            more, self._failed, self._said = self._failed, 0, now
        if first:
            self.logger.warning("%s (%s); the same failure again is counted, not logged", self.what, detail,
                                exc_info=True)
        else:
            self.logger.warning("%s: %d more times in the last minute (%s)", self.what, more + 1, detail)

    def succeeded(self) -> None:
        if self._since is None:  # the usual case: no lock taken
            return
        with self._lock:
            if self._since is None:
                return
            lasted, more = time.monotonic() - self._since, self._failed
            self._since, self._failed = None, 0
        self.logger.warning("%s: working again after %.0f s (%d more failures)", self.what, lasted, more)
