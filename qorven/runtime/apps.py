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

        from .startup import Startup, on_startup

        @on_startup("serve", "worker")
        def backup_dir_check(startup: Startup) -> None:
            """Where scheduled backups are written (a worker, or the embedded default's
            server), a directory they cannot go to stops the start, not the first night."""
            from django.conf import settings
            from django.core.exceptions import ImproperlyConfigured

            from .scheduled_backups import BackupDirError, backup_dir_prepare

            if not settings.QORVEN_BACKUP_SCHEDULE or (startup.process == "serve" and not startup.embedded):
                return
            try:
                backup_dir_prepare(settings.QORVEN_BACKUP_DIR)
            except BackupDirError as exc:
                raise ImproperlyConfigured(
                    f"QORVEN_BACKUP_DIR: {exc} (QORVEN_BACKUP_SCHEDULE is set: backups are written there)") from None
