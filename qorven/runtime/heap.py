"""What a long-running process made while starting, set aside from full garbage collections.

A full collection (generation 2) walks every object the collector tracks. Once `qorven
serve` has started that is Django, the apps and every module imported — about 200,000
objects — and each full collection took about 100 ms, in which no socket of the server got
a frame and no request an answer (the fan-out bench's slowest deliveries). They live as
long as the process: `gc.freeze()` moves them to a permanent generation that collections
skip, and what requests, sockets and turns make afterwards is collected as before (full
collections of it took 10–13 ms under the same load).

A Celery worker freezes before its pool forks, so every child starts with its startup
objects set aside (and a collection in a child does not write to those shared pages).
"""
from __future__ import annotations

import gc


def startup_heap_freeze() -> int:
    """Collect what is garbage now, then freeze the rest; returns how many are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
