from __future__ import annotations

from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    """The machinery under every app: the embedded task backend, the in-process channel
    layer, the live publisher, the stream cache; and the `serve` and `worker` commands
    that run them."""

    name = "qorven.runtime"
    label = "runtime"
    verbose_name = "Runtime"
