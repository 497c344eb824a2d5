from __future__ import annotations

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from qorven.celery import app as celery_app
from qorven.runtime.worker import broker_is_embedded, embedded_worker


class Command(BaseCommand):
    help = (
        "Serve Qorven (HTTP and WebSockets) with Daphne. On the embedded default (no REDIS_URL) "
        "a Celery worker runs inside this process, and so does the heartbeat scheduler (Celery "
        "beat), so nothing else needs to be started. Syncs the heartbeats defaults file and the "
        "learned skills folder on startup."
    )

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
        parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
        parser.add_argument("--no-migrate", action="store_true", help="do not apply migrations first")
        parser.add_argument(
            "--no-beat", action="store_true",
            help="do not fire heartbeats in this process (embedded default; with REDIS_URL run `qorven beat`)",
        )

    def handle(self, *args, **opts):
        from daphne.cli import CommandLineInterface

        if not opts["no_migrate"]:
            call_command("migrate", interactive=False, verbosity=0)
        from heartbeats_app.startup import beats_sync_on_startup
        from memory_app.skills import skills_sync_on_startup

        beats_sync_on_startup(self.stdout, self.stderr)
        skills_sync_on_startup(self.stdout, self.stderr)
        if broker_is_embedded(celery_app):
            embedded_worker.ensure_started()
            self.stdout.write(f"Tasks run in this process ({settings.QORVEN_WORKER_CONCURRENCY} at a time).")
            if not opts["no_beat"]:
                from heartbeats_app.scheduler import embedded_beat_start

                embedded_beat_start()
                self.stdout.write("Heartbeats fire in this process (embedded beat).")
        self.stdout.write(f"Qorven on http://{opts['host']}:{opts['port']}/  (admin: /admin/)")
        self.stdout.flush()
        CommandLineInterface().run(
            ["--bind", opts["host"], "--port", str(opts["port"]), "qorven.asgi:application"]
        )
