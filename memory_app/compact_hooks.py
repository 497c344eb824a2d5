"""What runs as a /compact, holding its session, is about to call the summarizer.

Registered by the apps above memory_app at startup (the agent gives up the place a message
waiting for the same capped model server holds in its queue: qorven.agent.slot_places,
which the compaction's calls would otherwise wait behind). A module of its own, importing
nothing, so that registering loads none of the summarizer's machinery (a worker must set up
its metrics before the model clients are imported)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sessions_app.models import Session

compact_start_hooks: list[Callable[[Session], None]] = []
