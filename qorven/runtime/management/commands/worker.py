from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from qorven.runtime.arguments import log_level, whole_number


class Command(BaseCommand):
    help = (
        "Run a Celery worker for the scale-out layout (needs REDIS_URL or CELERY_BROKER_URL). "
        "On the embedded default there is nothing to run: tasks execute inside `qorven serve`. Syncs "
        "the learned skills folder on startup."
    )
    # Checked in handle(), once the metrics folder is set: the URL check imports the metrics.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", "-c", type=whole_number(1, 10_000), default=settings.QORVEN_WORKER_CONCURRENCY,
                            help="tasks at once (default QORVEN_WORKER_CONCURRENCY, 4)")
        parser.add_argument("--loglevel", "-l", type=log_level, default=settings.QORVEN_LOG_LEVEL,
                            help="log level (default QORVEN_LOG_LEVEL, INFO)")
        parser.add_argument("--metrics-port", type=whole_number(0, 65535), default=settings.QORVEN_WORKER_METRICS_PORT,
                            help="serve this worker's Prometheus metrics (turns, model calls, of all its "
                                 "processes) on this port (default QORVEN_WORKER_METRICS_PORT; 0: off)")
        parser.add_argument("--metrics-host", default="127.0.0.1",
                            help="the address the metrics port listens on (default 127.0.0.1)")

    def handle(self, *args, **opts):
        from celery import current_app

        from qorven.runtime.heap import startup_heap_freeze
        from qorven.runtime.startup import Startup, startup_run
        from qorven.runtime.worker import broker_is_embedded

        app = current_app._get_current_object()  # the project's Celery app (qorven.celery)
        if broker_is_embedded(app):
            raise CommandError("No broker configured: set REDIS_URL (or CELERY_BROKER_URL) to run workers.")

        if opts["metrics_port"]:
            _metrics_serve(opts["metrics_host"], opts["metrics_port"])
            self.stdout.write(f"Metrics on http://{opts['metrics_host']}:{opts['metrics_port']}/metrics")
        if not opts.get("skip_checks"):
            self.check()
        if "QORVEN_SEND_SLOTS" not in os.environ:  # half of this worker's slots, as by default
            settings.QORVEN_SEND_SLOTS = max(opts["concurrency"] // 2, 1)
        startup_run(Startup("worker", self.stdout, self.stderr, False, opts), after_worker=False)
        _connections_prepare()
        startup_heap_freeze()  # before the pool forks: every child starts with it
        app.worker_main(
            ["worker", f"--concurrency={opts['concurrency']}", f"--loglevel={opts['loglevel']}", "--without-gossip",
             "--without-mingle"]
        )


# A child keeps its database connection between tasks, for this long at most (then it
# connects again) and for this many tasks (Celery's own recycling, CELERY_DB_REUSE_MAX).
CHILD_CONNECTION_AGE = 300.0
CHILD_CONNECTION_TASKS = 1000


def _connections_prepare() -> None:
    """Close this process's connections and pool, and set up the children's.

    The worker forks its children from here, so nothing opened here may be shared with
    them. Each child runs one task at a time on one connection of its own, without a pool,
    and keeps it from task to task: connecting (about 5 ms here) costs more than a short
    turn's queries. Celery would close it around every task; instead it is checked before
    each task (replaced if the database dropped it) and closed after one that broke it.
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
    settings.CELERY_DB_REUSE_MAX = CHILD_CONNECTION_TASKS  # read by Celery's Django fixup as the worker starts
    signals.worker_process_init.connect(_child_connections, weak=False, dispatch_uid="qorven.worker.connections")
    # Connected as the worker starts, after Celery's Django fixup has connected its own
    # handler (which closes what a child inherited), so a child warms up after that.
    signals.worker_init.connect(_children_warm, weak=False, dispatch_uid="qorven.worker.warm")


# A child's warm-up must end well within Celery's 4 s for a child to report itself up
# (a child that does not is killed and another started, which would warm up again): the
# connect (2 s, the least libpq and psycopg take), the reads as a whole and each read are
# bounded, at 3 s all told.
WARM_CONNECT_TIMEOUT = 2
WARM_READS_SECONDS = 0.75
WARM_READ_TIMEOUT_MS = 250


def _children_warm(**kwargs: object) -> None:
    from celery import signals

    signals.worker_process_init.connect(_child_warm, weak=False, dispatch_uid="qorven.worker.child_warm")


def _child_warm(**kwargs: object) -> None:
    """A child connects to the database and runs each prepared read once before its first
    task (qorven.runtime.prepared_read.prepared_reads_warm): its first turn would pay
    50–200 ms more than the next ones otherwise. If the database cannot be reached now,
    the first task connects as usual."""
    import logging

    import time

    from django.db import connection, transaction

    from qorven.runtime.database import connections_drop_broken
    from qorven.runtime.prepared_read import prepared_reads_warm

    options = connection.settings_dict.setdefault("OPTIONS", {})
    bounded = connection.vendor == "postgresql" and "connect_timeout" not in options
    if bounded:
        options["connect_timeout"] = WARM_CONNECT_TIMEOUT
    try:
        connection.ensure_connection()
        until = time.monotonic() + WARM_READS_SECONDS
        with transaction.atomic():  # SET LOCAL: the bound ends with it
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute(f"SET LOCAL statement_timeout = {WARM_READ_TIMEOUT_MS}")
            prepared_reads_warm(until=until)
    except Exception as exc:
        logging.getLogger(__name__).warning("a worker process did not warm up (its first task will): %s", exc)
        connections_drop_broken()
    finally:
        if bounded:
            options.pop("connect_timeout", None)  # for this connection's opening only


def _child_connections(**kwargs: object) -> None:
    from celery import signals
    from django.db import close_old_connections, connections

    for conn in connections.all():
        options = conn.settings_dict.setdefault("OPTIONS", {})
        options.pop("pool", None)
        conn.settings_dict["CONN_MAX_AGE"] = CHILD_CONNECTION_AGE
        conn.settings_dict["CONN_HEALTH_CHECKS"] = True
        if conn.vendor == "postgresql" and not os.environ.get("PGAPPNAME"):
            # As pg_stat_activity shows it; an operator's own name for it (PGAPPNAME) stands.
            options.setdefault("application_name", "qorven worker")
    # Before a task its first query checks the connection; after one, a connection an
    # error left unusable, or past its age, is closed.
    signals.task_prerun.connect(close_old_connections, weak=False, dispatch_uid="qorven.worker.check_before")
    signals.task_postrun.connect(close_old_connections, weak=False, dispatch_uid="qorven.worker.check_after")


METRICS_FOLDER = "qorven-worker-metrics-"  # + the worker's pid + "-" + random


def _metrics_folders_stale_remove(root: Path) -> None:
    """The metrics folders of workers that are gone without removing theirs (killed with
    SIGKILL, say): their files would otherwise pile up in the temporary folder."""
    import shutil

    for folder in root.glob(f"{METRICS_FOLDER}*"):
        pid = folder.name[len(METRICS_FOLDER):].partition("-")[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:  # alive, someone else's
            pass


def _metrics_serve(host: str, port: int) -> None:
    """Turns and model calls happen in the worker's children, whose counters the web
    server's /metrics cannot see: they are kept in prometheus-client's multiprocess files
    (a folder of this worker's, removed at exit) and served, summed, on `port`."""
    import atexit
    import shutil
    import sys
    import tempfile

    from celery import signals

    if "prometheus_client" in sys.modules:  # its metrics would already count in this process's memory
        raise CommandError("--metrics-port: the worker must set up its metrics before anything else.")
    _metrics_folders_stale_remove(Path(tempfile.gettempdir()))
    path = tempfile.mkdtemp(prefix=f"{METRICS_FOLDER}{os.getpid()}-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    atexit.register(shutil.rmtree, path, True)
    import threading
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from prometheus_client import CollectorRegistry, make_wsgi_app, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)
    metrics = make_wsgi_app(registry)

    def guarded(environ: dict, start_response):  # the web server's /metrics rules (QORVEN_METRICS_TOKEN)
        from qorven.runtime.metrics import scrape_refused

        refused = scrape_refused(authorization=environ.get("HTTP_AUTHORIZATION", ""),
                                 address=environ.get("REMOTE_ADDR", ""), meta=environ)
        if refused is not None:
            start_response(f"{refused[0]} {'Unauthorized' if refused[0] == 401 else 'Forbidden'}",
                           [("Content-Type", "text/plain; charset=utf-8")])
            return [refused[1].encode()]
        return metrics(environ, start_response)

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: object) -> None:  # scrapes are not news
            pass

    try:
        server = make_server(host, port, guarded, server_class=Server, handler_class=Quiet)
    except OSError as exc:
        # A name that does not resolve, or an address not this machine's, is the host's fault;
        # a port in use or not ours to take, the port's.
        blamed = f"--metrics-host {host}" if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL \
            else f"--metrics-port {port}"
        raise CommandError(f"{blamed}: {exc.strerror or exc}") from None
    threading.Thread(target=server.serve_forever, name="qorven-worker-metrics", daemon=True).start()

    def child_gone(pid: int | None = None, **kwargs: object) -> None:
        multiprocess.mark_process_dead(pid or os.getpid(), path)

    signals.worker_process_shutdown.connect(child_gone, weak=False, dispatch_uid="qorven.worker.metrics")
