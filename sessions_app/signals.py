"""Domain events of the conversation store, sent after the transaction commits.

`message_appended(sender=Message, message=…)`: the edges (live surfaces, delivery to
platforms) observe appends through this, so nothing in the core imports an adapter.
"""
from __future__ import annotations

from django.dispatch import Signal

# Cached receivers: one lookup per sender, not a walk over weak references per append.
message_appended = Signal(use_caching=True)
