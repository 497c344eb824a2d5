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
        _pool_drop()
        app.worker_main(
            ["worker", f"--concurrency={opts['concurrency']}", f"--loglevel={opts['loglevel']}", "--without-gossip",
             "--without-mingle"]
        )


def _pool_drop() -> None:
    """Close this process's connections and pool, and run the worker's children without one.

    The worker forks its children from here, so nothing opened here may be shared with
    them. Each child runs one task at a time and Celery closes its connection (and any
    pool) after every task: a pool there would open and close several connections per
    task, so the children connect plainly, as they would without one.
    """
    from celery import signals
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        if conn.in_atomic_block:
            continue  # run by a caller holding a transaction (a test): theirs to close
        conn.close()
        # Only a pool this process opened (asking for `conn.pool` would open one).
        if conn.alias in getattr(conn, "_connection_pools", {}):
            conn.close_pool()
    signals.worker_process_init.connect(_child_without_pool, weak=False, dispatch_uid="qorven.worker.no_pool")


def _child_without_pool(**kwargs: object) -> None:
    from django.db import connections

    for conn in connections.all():
        conn.settings_dict.get("OPTIONS", {}).pop("pool", None)
