"""The broker URL schemes whose kombu transports are Qorven's, registered by name.

kombu imports a transport named this way when a connection to its broker is first made, so
a command that publishes nothing (`qorven --help`, `qorven check`, …) does not import
kombu's Redis transport and the Redis client under it (about 0.1 s of every command's
start), nor the virtual transport of the embedded broker.
"""
from __future__ import annotations

from kombu.transport import TRANSPORT_ALIASES

EMBEDDED = "embedded"  # the embedded default's broker: qorven.runtime.transport

TRANSPORT_ALIASES.setdefault(EMBEDDED, "qorven.runtime.transport:Transport")
# kombu's own, except that a channel whose connection is gone fails as a lost connection.
TRANSPORT_ALIASES["redis"] = "qorven.runtime.redis_transport:Transport"
