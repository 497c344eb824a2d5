"""Domain events of the conversation store, sent after the transaction commits.

`message_appended(sender=Message, message=…)`: the edges (live surfaces, delivery to
platforms) observe appends through this, so nothing in the core imports an adapter.

`answers_dropped(sender=Message, messages=[…])`: user messages that were waiting for an
answer and will get neither a reply nor a notice (their sender left the workspace, or
`/clear` ended their conversation first). A platform that shows its sender waiting (a
Discord /ask, deferred) takes the waiting away.
"""
from __future__ import annotations

from django.dispatch import Signal

# Cached receivers: one lookup per sender, not a walk over weak references per append.
message_appended = Signal(use_caching=True)
answers_dropped = Signal()
