from __future__ import annotations

from collections.abc import Callable
from types import FrameType

from celery import current_app
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.utils.module_loading import import_string

from qorven.runtime.database import database_named, database_wait
from qorven.runtime.heap import startup_heap_freeze
from qorven.runtime.startup import Startup, shutdown_run, startup_run
from qorven.runtime.worker import broker_is_embedded, embedded_worker

SHUTDOWN_WAIT = 30.0  # seconds the running tasks get to finish when the server stops
SOCKETS_CLOSE_WAIT = 5  # seconds uvicorn waits for open requests and sockets when it stops


class Command(BaseCommand):
    help = (
        "Serve Qorven (HTTP and WebSockets) with uvicorn (or Daphne). On the embedded default (no REDIS_URL) "
        "a Celery worker runs inside this process, and so does the heartbeat scheduler (Celery "
        "beat), so nothing else needs to be started. Syncs the heartbeats defaults file and the "
        "learned skills folder on startup."
    )

    def add_arguments(self, parser):
        parser.add_argument("--port", type=_port, default=8000, help="port to listen on, 1-65535 (default 8000)")
        parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
        parser.add_argument("--no-migrate", action="store_true", help="do not apply migrations first")
        parser.add_argument(
            "--server", choices=("daphne", "uvicorn"), default=settings.QORVEN_ASGI_SERVER,
            help="the ASGI server (default QORVEN_ASGI_SERVER, uvicorn); uvicorn writes WebSocket frames "
                 "to many sockets faster than Daphne (docs/performance.md)",
        )
        parser.add_argument(
            "--no-beat", action="store_true",
            help="do not fire heartbeats in this process (embedded default; with REDIS_URL run `qorven beat`)",
        )

    def handle(self, *args, **opts):
        _address_check(opts["host"], opts["port"])
        database_wait(self.stderr)
        if not opts["no_migrate"]:
            call_command("migrate", interactive=False, verbosity=0)
        self.check(databases=["default"])  # what needs the migrated database (sessions_app.checks)
        # The app the server serves, loaded before any thread of ours starts: loading it sets
        # Django up again, and configuring logging again while another thread makes a
        # handler failed the server's start ("'NullHandler' object has no attribute 'lock'").
        import_string(settings.ASGI_APPLICATION)
        embedded = broker_is_embedded(current_app)
        startup = Startup("serve", self.stdout, self.stderr, embedded, opts)
        startup_run(startup, after_worker=False)  # the heartbeats file, the skills folder
        if embedded:
            # Ready before this thread goes on: the worker's thread imports Celery's event
            # modules as it starts, and the startup sweep queued below imported them too;
            # the two imports, each holding one module's lock, met in a deadlock
            # (_DeadlockError on celery.events.receiver: the server did not start, once in CI).
            embedded_worker.ensure_started(wait=30)
            self.stdout.write(f"Tasks run in this process ({settings.QORVEN_WORKER_CONCURRENCY} at a time).")
        startup_run(startup, after_worker=True)  # the embedded beat
        prefix = settings.QORVEN_URL_PREFIX
        self.stdout.write(f"Database: {database_named()}")
        self.stdout.write(f"Qorven on http://{opts['host']}:{opts['port']}{prefix}/  (admin: {prefix}/admin/)")
        self.stdout.flush()
        _reads_warm()
        startup_heap_freeze()  # the app, loaded above, with the rest
        stopping = _Once(lambda: shutdown_run(startup))  # the embedded beat: no run is queued from then on
        if opts["server"] == "uvicorn":
            _uvicorn_run(opts["host"], opts["port"], on_signal=stopping)  # at the signal, before sockets close
        else:
            # Imported only here: daphne installs Twisted's reactor as it is imported, a
            # quarter of a second that a start on uvicorn (the default) need not pay.
            from daphne.cli import CommandLineInterface

            CommandLineInterface().run(
                ["--bind", opts["host"], "--port", str(opts["port"]), "qorven.asgi:application"]
            )
        stopping()
        if embedded:
            # Stopped (SIGTERM, Ctrl-C): the tasks running finish — a turn half-way, a send
            # half-way — rather than die with the process; what is only queued is in the
            # database and is swept up when the server starts again.
            self.stdout.write("Finishing the tasks running…")
            self.stdout.flush()
            embedded_worker.stop(timeout=SHUTDOWN_WAIT)


def _address_check(host: str, port: int) -> None:
    """Refuse, before anything starts, an address this process could not listen on. The
    servers find out only once the worker, the beat and the migrations have run, and say so
    in a log line after "Qorven on …" was printed with the address of the server holding it."""
    import errno
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise CommandError(f"--host {host}: not an address this machine can listen on ({exc.strerror})") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as both servers do: TIME_WAIT is free
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CommandError(f"{host}:{port} is taken (is Qorven, or `make run`, already running?): stop "
                                   "what listens there, or serve on another port with --port (make run PORT=…)"
                                   ) from None
            raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def _reads_warm() -> None:
    """Compile and run each prepared read once (qorven.runtime.prepared_read): the first
    requests and turns after a start do not pay for it. Its connection goes back (to the
    pool, on PostgreSQL) for the requests' threads."""
    import logging

    from django.db import connection

    from qorven.runtime.prepared_read import prepared_reads_warm

    try:
        prepared_reads_warm()
    except Exception as exc:  # the first request reads as usual
        logging.getLogger(__name__).warning("the prepared reads were not warmed up: %s", exc)
    finally:
        if not connection.in_atomic_block:  # else run by a caller holding a transaction (a test): theirs
            connection.close()


class _Once:
    """`action`, run on the first call only: shutdown begins at the signal (uvicorn) or
    once the server has returned (Daphne), whichever comes first."""

    def __init__(self, action: Callable[[], None]) -> None:
        self._action: Callable[[], None] | None = action

    def __call__(self) -> None:
        action, self._action = self._action, None
        if action is not None:
            action()


def _uvicorn_run(host: str, port: int, *, on_signal: Callable[[], None]) -> None:
    """Serve with uvicorn until SIGTERM or Ctrl-C, then return, as Daphne's runner does.

    uvicorn stops on either signal and then raises it again for the handler that was there
    before it: the default one would end the process before its running tasks finish, so a
    handler that only notes it is installed for the time being. No lifespan events (Django
    has none); our logging (ids, masking, JSON), not uvicorn's own; uvicorn's own reading of
    forwarded headers is off: the app takes the client's address from a trusted proxy the
    same way under either server (qorven.runtime.client_address).
    uvicorn runs on uvloop and parses HTTP with httptools (both dependencies; without them
    it falls back to asyncio's loop and h11). `on_signal` runs at the first SIGTERM or
    Ctrl-C, before uvicorn waits for the open sockets to close (up to SOCKETS_CLOSE_WAIT)."""
    import signal
    import sys

    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            on_signal()
            super().handle_exit(sig, frame)

    before = {sig: signal.signal(sig, lambda signum, frame: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        config = uvicorn.Config("qorven.asgi:application", host=host, port=port, lifespan="off",
                                ws="websockets-sansio", ws_max_size=settings.QORVEN_MAX_BODY, log_config=None,
                                proxy_headers=False, server_header=False,
                                timeout_graceful_shutdown=SOCKETS_CLOSE_WAIT)
        server = Server(config=config)
        try:
            server.run()
        except KeyboardInterrupt:
            pass
        if not server.started:  # as uvicorn.run ends when the server could not start
            sys.exit(3)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _port(value: str) -> int:
    """A TCP port, for argparse: 65536 and up would be taken modulo by the socket layer,
    and the server would say it listens where it does not."""
    import argparse

    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (1-65535)")
    return port
