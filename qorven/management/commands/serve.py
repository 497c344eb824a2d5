from __future__ import annotations

from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Serve Qorven (HTTP and WebSockets) with Daphne. On the embedded default (no REDIS_URL) "
        "tasks run inside this process, so nothing else needs to be started. Syncs the learned "
        "skills folder on startup."
    )

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
        parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
        parser.add_argument("--no-migrate", action="store_true", help="do not apply migrations first")

    def handle(self, *args, **opts):
        from daphne.cli import CommandLineInterface

        if not opts["no_migrate"]:
            call_command("migrate", interactive=False, verbosity=0)
        from memory_app.skills import skills_sync_on_startup

        skills_sync_on_startup(self.stdout, self.stderr)
        self.stdout.write(f"Qorven on http://{opts['host']}:{opts['port']}/  (admin: /admin/)")
        self.stdout.flush()
        CommandLineInterface().run(
            ["--bind", opts["host"], "--port", str(opts["port"]), "qorven.asgi:application"]
        )
