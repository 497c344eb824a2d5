from __future__ import annotations

import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = (
        "Run a Celery worker for the scale-out layout (needs REDIS_URL or CELERY_BROKER_URL). "
        "On the embedded default there is nothing to run: tasks execute inside `qorven serve`. Syncs "
        "the learned skills folder on startup."
    )

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", "-c", type=int, default=settings.QORVEN_WORKER_CONCURRENCY,
                            help="tasks at once (default QORVEN_WORKER_CONCURRENCY, 4)")
        parser.add_argument("--loglevel", "-l", default="INFO", help="log level (default INFO)")

    def handle(self, *args, **opts):
        from celery import current_app

        from qorven.runtime.startup import Startup, startup_run
        from qorven.runtime.worker import broker_is_embedded

        app = current_app._get_current_object()  # the project's Celery app (qorven.celery)
        if broker_is_embedded(app):
            raise CommandError("No broker configured: set REDIS_URL (or CELERY_BROKER_URL) to run workers.")

        if "QORVEN_SEND_SLOTS" not in os.environ:  # half of this worker's slots, as by default
            settings.QORVEN_SEND_SLOTS = max(opts["concurrency"] // 2, 1)
        startup_run(Startup("worker", self.stdout, self.stderr, False, opts), after_worker=False)
        app.worker_main(
            ["worker", f"--concurrency={opts['concurrency']}", f"--loglevel={opts['loglevel']}", "--without-gossip",
             "--without-mingle"]
        )
