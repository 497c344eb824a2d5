from __future__ import annotations

from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    """The machinery under every app: the embedded task backend, the in-process channel
    layer, the live publisher, the stream cache; and the `serve` and `worker` commands
    that run them."""

    name = "qorven.runtime"
    label = "runtime"
    verbose_name = "Runtime"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from .sqlite_file import sqlite_files_private

        connection_created.connect(sqlite_files_private, dispatch_uid="qorven.runtime.sqlite_files_private")
