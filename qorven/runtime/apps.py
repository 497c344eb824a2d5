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
        def route_slots_upgrade(startup: Startup) -> None:
            """The model servers' single slot queues of before the per-tenant lanes, left in
            Redis with no expiry, go: once per install. A Redis that cannot be read now is
            not a reason to refuse the start: the next start does it."""
            from django.conf import settings

            if not settings.REDIS_URL:
                return
            from .route_slots.shared import legacy_queues_remove

            try:
                legacy_queues_remove()
            except Exception as exc:
                startup.stderr.write(f"model server slots: the old queues were not removed ({type(exc).__name__});"
                                     " the next start removes them\n")

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
