"""The platforms Qorven has an adapter for, by channel kind, and the cache of the bindings
their webhooks resolve.

Named here rather than read off the adapter registry so that start-up (`ready()`, which
every `qorven` command runs) registers them without importing the adapters, which bring
httpx, pydantic and the formatting of replies: a third of a second of every command's
start. `tests/channels_app/test_platforms.py` holds this list to the registry's.
"""
from __future__ import annotations

from qorven.runtime.row_cache import RowCache

PLATFORMS: tuple[str, ...] = ("telegram", "whatsapp", "slack", "discord", "email", "sms", "webchat")

# The enabled bindings webhooks resolve on every request, by (kind, lookup key): cleared
# when a binding, its tenant or its Qor is saved or deleted (channels_app.apps).
webhook_bindings: RowCache = RowCache("webhook bindings")
