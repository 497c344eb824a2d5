from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from qorven.runtime.arguments import log_level, seconds


class Command(BaseCommand):
    help = (
        "Run Celery beat for the scale-out layout (needs REDIS_URL or CELERY_BROKER_URL): syncs the "
        "heartbeats defaults file and the backup schedule (QORVEN_BACKUP_SCHEDULE), then sends each due "
        "heartbeat and backup to the workers, reading the schedule from the database (django-celery-beat). "
        "Run exactly one. On the embedded default there is nothing to run: `qorven serve` fires heartbeats "
        "itself."
    )

    def add_arguments(self, parser):
        parser.add_argument("--loglevel", "-l", type=log_level, default=settings.QORVEN_LOG_LEVEL,
                            help="log level (default QORVEN_LOG_LEVEL, INFO)")
        parser.add_argument(
            "--max-interval", type=seconds(more_than_zero=True), default=5.0,
            help="longest sleep between schedule checks, seconds (default 5)",
        )
        parser.add_argument("--no-sync", action="store_true", help="do not sync the defaults file first")

    def handle(self, *args, **opts):
        from celery import current_app

        from heartbeats_app.scheduler import SCHEDULER_PATH
        from heartbeats_app.startup import backup_beat_sync_on_startup, beats_sync_on_startup
        from qorven.runtime.database import database_wait
        from qorven.runtime.worker import broker_is_embedded

        app = current_app._get_current_object()  # the project's Celery app (qorven.celery)
        if broker_is_embedded(app):
            raise CommandError("No broker configured: set REDIS_URL (or CELERY_BROKER_URL) to run beat.")

        database_wait(self.stderr)  # the scheduler waits for it too, but the syncs come first
        if not opts["no_sync"]:
            beats_sync_on_startup(self.stdout, self.stderr)
        backup_beat_sync_on_startup(self.stdout)  # from the environment, not the file: always
        app.Beat(
            app=app, scheduler=SCHEDULER_PATH, loglevel=opts["loglevel"], max_interval=opts["max_interval"],
            quiet=False,
        ).run()
