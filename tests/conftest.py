"""Shared fixtures. Every fixture set has two tenants, so isolation is tested everywhere.

alice owns tenant A ("acme", Qor "aria"); bob is a member of A; charlie owns tenant B
("globex", Qor "aria" too — the same slug in another tenant must never be reachable).
"""
from __future__ import annotations

import faulthandler
import gc
import os
import sys
import uuid
from dataclasses import dataclass

import pytest

from tenancy.models import Membership, Qor, Tenant

from .factories.tenancy import MembershipFactory, QorFactory, TenantFactory, UserFactory
from .processes import black_hole, cache_redis, hung_redis, processes  # noqa: F401  (fixtures: a Redis of its own as the cache, one that hangs, a port that never takes a connection; real qorven processes)


@dataclass
class World:
    tenant_a: Tenant
    tenant_b: Tenant
    qor_a: Qor
    qor_b: Qor
    alice: object
    bob: object
    charlie: object


@pytest.fixture
def world(db) -> World:
    tenant_a = TenantFactory(slug="acme")
    tenant_b = TenantFactory(slug="globex")
    qor_a = QorFactory(tenant=tenant_a, slug="aria")
    qor_b = QorFactory(tenant=tenant_b, slug="aria")
    alice = UserFactory(username="alice", first_name="Alice")
    bob = UserFactory(username="bob", first_name="Bob")
    charlie = UserFactory(username="charlie", first_name="Charlie")
    MembershipFactory(tenant=tenant_a, user=alice, role=Membership.Role.OWNER)
    MembershipFactory(tenant=tenant_a, user=bob)
    MembershipFactory(tenant=tenant_b, user=charlie, role=Membership.Role.OWNER)
    return World(tenant_a, tenant_b, qor_a, qor_b, alice, bob, charlie)


@pytest.fixture
def tenant_admin(client, world):
    """The admin as alice, acme's owner, made staff: no superuser, no Django model
    permissions; she administers acme's rows only."""
    world.alice.is_staff = True
    world.alice.save(update_fields=["is_staff"])
    client.force_login(world.alice)
    return client


@pytest.fixture
def host(client, db):
    """The admin as the host: a superuser, who sees every tenant."""
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def emptied(clients: dict):
    """`clients` (a process's cache of built clients) empty for the test, as a process
    starting has none; what was in it is put back after. For a fixture to yield from."""
    kept = dict(clients)
    clients.clear()
    try:
        yield clients
    finally:
        clients.clear()
        clients.update(kept)


def database_vendor() -> str:
    from django.db import connection

    return connection.vendor


@pytest.fixture(autouse=True, scope="session")
def _database_set_up_first(django_db_setup):
    """Every worker's test database is made as the worker starts, not at its first test
    that asks for it. Under `--dist worksteal` a worker that took the tests without the
    database first made it minutes into the run, after one of those tests had tried a query:
    Django's PostgreSQL backend makes its connection pool as a cursor is asked for, before
    pytest-django refuses the connection, so the pool was made for the base database `test`.
    Making the test database does not close a pool (only cloning and destroying one do), so
    the migrations and every later query of that worker ran on `test`, while the processes
    its tests started, given the test database's name, found it empty: "relation
    qorven_tenant does not exist", 150 to 240 errors a run."""


@pytest.fixture(autouse=True, scope="session")
def _no_processes_left(_database_set_up_first):
    """What a test started and left running is killed as the run ends, before its test
    database is dropped (a process still connected keeps it, and the next run could not
    make it again: every test of that worker failed)."""
    yield
    from .processes import processes_left_kill

    left = processes_left_kill()
    if left:
        print(f"\nkilled {len(left)} processes tests left running: {left}", file=sys.stderr)
    # What async tests handed to sync_to_async ran on asgiref's one thread, whose database
    # connection nothing closes: on PostgreSQL it stayed out of the pool, and the test
    # database could not be dropped ("being accessed by other users").
    from asgiref.sync import SyncToAsync
    from django.db import connections

    SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=30)


@pytest.fixture(autouse=True, scope="session")
def _flush_deletes_on_postgresql():
    """A test that commits (`transaction=True`) has the tables emptied after it by Django's
    flush, on PostgreSQL one TRUNCATE of every table: 0.6 to 1 s here, as each table gets
    new files, where deleting the few rows a test wrote takes 20 to 60 ms. Same end: every
    table empty, sequences kept (a flush that resets them still truncates); the foreign keys
    are all deferrable, so they are checked once the tables are empty."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences or allow_cascade:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return ["SET CONSTRAINTS ALL DEFERRED"] + [
            f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))};" for table in tables]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "sql_flush", sql_flush)
        yield


KEPT_BY_FLUSH = frozenset({"django_content_type", "auth_permission"})


@pytest.fixture(autouse=True, scope="session")
def _flush_keeps_content_types_and_permissions():
    """The flush after a test that commits leaves Django's content types and permissions
    as the migrations made them. Emptied, they were made again after every such test by
    the post_migrate signal the flush sends (one INSERT per model and permission, 0.1 to
    0.2 s a test); kept, Django's two receivers of it, which make them, would only read
    them all back (0.05 s), so the signal goes to its other receivers only. No test writes
    either table."""
    from django.contrib.auth.management import create_permissions
    from django.contrib.contenttypes.management import create_contenttypes
    from django.core.management.commands import flush
    from django.db.models.signals import post_migrate

    def sql_flush(style, connection, reset_sequences=True, allow_cascade=False):
        tables = [table for table in connection.introspection.django_table_names(only_existing=True,
                                                                                 include_views=False)
                  if table not in KEPT_BY_FLUSH]
        return connection.ops.sql_flush(style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)

    emit = flush.emit_post_migrate_signal
    permissions_uid = "django.contrib.auth.management.create_permissions"

    def emit_post_migrate_signal(verbosity, interactive, db, **kwargs):
        post_migrate.disconnect(create_permissions, dispatch_uid=permissions_uid)
        post_migrate.disconnect(create_contenttypes)
        try:
            emit(verbosity, interactive, db, **kwargs)
        finally:
            post_migrate.connect(create_contenttypes)
            post_migrate.connect(create_permissions, dispatch_uid=permissions_uid)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flush, "sql_flush", sql_flush)
        patch.setattr(flush, "emit_post_migrate_signal", emit_post_migrate_signal)
        yield


@pytest.fixture(autouse=True)
def _fresh_row_caches():
    """Rows cached by an earlier test's process state are not this test's rows."""
    from qorven.agent.held_windows import held_windows_clear
    from qorven.agent.prompt import window_hints_clear
    from qorven.runtime.row_cache import row_caches_clear

    row_caches_clear()
    window_hints_clear()
    held_windows_clear()
    yield
    row_caches_clear()


_ENVIRONMENT_BEFORE: dict[str, str] = {}
_ENVIRONMENT_OWN = frozenset({"PYTEST_CURRENT_TEST"})  # pytest's own, set for each phase


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _ENVIRONMENT_BEFORE.clear()
    _ENVIRONMENT_BEFORE.update(os.environ)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A test leaves the process's environment as it found it, once its fixtures (a
    monkeypatch's too) are torn down. The processes later tests of the same worker start
    inherit it: one test's scrub of DJANGO_* and of the run's Redis prefixes made every
    later `qorven beat` of its worker report where no test looked."""
    yield
    before, after = dict(_ENVIRONMENT_BEFORE), dict(os.environ)
    changed = sorted(name for name in (before.keys() | after.keys()) - _ENVIRONMENT_OWN
                     if before.get(name) != after.get(name))
    if changed:
        for name in changed:
            if name in before:
                os.environ[name] = before[name]
            else:
                del os.environ[name]  # not the next test's to fail
        pytest.fail(f"the test left the environment changed: {', '.join(changed)}", pytrace=False)


@pytest.fixture(autouse=True)
def _nothing_frozen_after():
    # `serve` and `worker` freeze the process's objects before serving (qorven.runtime.heap);
    # run inside the test process, that would keep each test's objects for good.
    yield
    if gc.get_freeze_count():
        gc.unfreeze()


@pytest.fixture(autouse=True)
def _no_mcp_sessions_left():
    # An MCP session stays open between calls (qorven.agent.mcp_sessions): one test's
    # server process is not the next test's.
    yield
    from qorven.agent.mcp_sessions import mcp_sessions_close

    mcp_sessions_close()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # PBKDF2's deliberate slowness costs seconds per fixture set; tests don't need it.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _summarizer_at_once(settings):
    # Auto mode's summarizer waits for a quiet conversation (QORVEN_SUMMARIZER_QUIET); a test
    # that drains its jobs would wait that out every time. The wait has tests of its own.
    settings.QORVEN_SUMMARIZER_QUIET = 0


@pytest.fixture(autouse=True)
def _own_rate_limit_counters(settings):
    # Rate-limit counters live in the cache, which outlives a test (and is shared with the
    # broker's Redis in CI, so it is never flushed): each test counts under its own prefix.
    settings.RATELIMIT_CACHE_PREFIX = f"test-rl-{uuid.uuid4().hex}:"


EMBEDDED_BROKER = "embedded://localhost"


def broker_use(settings, url: str) -> None:
    """Point the Celery app at `url`. Celery reads its settings from Django's as they are
    now, but keeps the connection and producer pools of the broker it used first; those
    are looked up again (kombu keeps one pool per broker, so nothing is closed)."""
    from qorven.celery import app

    if settings.CELERY_BROKER_URL != url:
        settings.CELERY_BROKER_URL = url
    if app._pool is not None and app._pool.connection.as_uri() != app.connection_for_write().as_uri():
        app._pool = None
        app.amqp._producer_pool = None


@pytest.fixture(autouse=True)
def _task_queue(request, settings):
    """Tasks run on this process's embedded worker unless a test asks for a real Celery
    worker. A test finds the queue empty and leaves it empty: what it queued has finished
    when it ends (it gets the time its jobs need, up to a bound), or it fails."""
    from qorven.runtime.worker import embedded_worker

    real = request.node.get_closest_marker("celery_worker") is not None
    broker_use(settings, settings.CELERY_BROKER_URL if real else EMBEDDED_BROKER)
    # A test kept from the test database (the browser tests: their server has its own)
    # queues nothing here; a worker started for it swept a database it may not read.
    uses_database = request.node.get_closest_marker("django_db") is not None or bool(
        {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback"}
        & set(request.fixturenames))
    if not real and uses_database and not embedded_worker.running:
        # A worker that starts sweeps for work left behind (channels_app.sweep): let that
        # happen before the test, not in the middle of it or after it. Its once-an-hour
        # marks (old inbound events pruned…) go with it: _no_gates_left cleared the cache
        # before this fixture ran (autouse fixtures run by name), and the test's own sweep
        # found them set and pruned nothing.
        embedded_worker.ensure_started(wait=30)
        embedded_worker.join(30)
        _gates_clear()
    left = embedded_worker.pending()
    if left:
        embedded_worker.reset()
        pytest.fail(f"an earlier test left jobs in the in-process queue: {left}")
    yield
    from channels_app.webhook_ingest import group_commit

    group_commit.flush(JOBS_SETTLE)  # webhooks answered in the test have their tasks queued
    if not embedded_worker.join(JOBS_SETTLE):
        left = embedded_worker.pending()
        faulthandler.dump_traceback(all_threads=True)
        embedded_worker.reset()
        pytest.fail(f"the test left jobs in the in-process queue: {left} (thread stacks above, on stderr)")


JOBS_SETTLE = 30.0  # seconds a test's queued jobs get to finish after it


@pytest.fixture(autouse=True)
def _no_gates_left():
    """Send gates, turn waiters, looked-up sender names and pairing codes' resend marks
    (cache keys named by row ids), models seen reasoning untagged (by a server's port) of an earlier test cannot hold this one's rows, nor its
    sweep of old inbound events keep this one's from running."""
    _gates_clear()
    yield


def _gates_clear() -> None:
    from django.conf import settings
    from django.core.cache import cache

    from qorven.runtime.redis_rest import rests_forget
    from qorven.runtime.streams import streams_forget

    # The replies streaming in this process, which the embedded default keeps there, and
    # the rest of the calls to a Redis that an earlier test's hang began.
    streams_forget()
    rests_forget()
    if "locmem" in settings.CACHES["default"]["BACKEND"].lower():
        cache.clear()  # this process's own memory
        return
    import re

    import redis

    # This run's keys only (its cache prefix, tests/isolated_env.py): another run, or a
    # browser test's server, may be using the same Redis database meanwhile.
    ours = re.sub(r"([*?\[\]\\])", r"\\\1", cache.make_key(""))
    client = redis.from_url(settings.CACHES["default"]["LOCATION"])
    for name in ("send:*", "turn-waiter:*", "sender-name:*", "pairing-code-sent:*", "qorven:inbound-pruned",
                 "qorven:deliveries-pruned", "qorven:pairings-pruned", "qorven:reasoner:*"):
        keys = list(client.scan_iter(match=ours + name, count=1000))
        if keys:
            client.delete(*keys)


class Schema:
    """The test database's migrations, which a test of a migration takes back and forward
    (the `schema` fixture). On the calling thread's connection."""

    def to(self, targets):
        """Migrated (back or forward) to `targets`, [(app, migration name)]; the executor."""
        from django.db import connection
        from django.db.migrations.executor import MigrationExecutor

        executor = MigrationExecutor(connection)
        executor.migrate(targets)
        return executor

    def latest(self):
        """Every migration applied."""
        from django.db import connection
        from django.db.migrations.executor import MigrationExecutor

        return self.to(MigrationExecutor(connection).loader.graph.leaf_nodes())


@pytest.fixture
def schema(transactional_db):
    """For a test that takes migrations back: every migration applied again after it,
    whether it passed or failed midway. A schema left behind fails every later test on
    this database (under xdist, every later test of that worker) with a missing column."""
    schema = Schema()
    yield schema
    schema.latest()


@pytest.fixture
def model_server(settings):
    """A scripted OpenAI-compatible server; Qorven is configured to use it."""
    from .fakes.model_server import ModelServer

    server = ModelServer().start()
    settings.OPENAI_BASE_URL = server.base_url
    settings.OPENAI_API_KEY = "test-key"
    settings.QORVEN_MODEL = "scripted-model"
    yield server
    server.stop()


PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture
def http_proxy(monkeypatch):
    """A forward proxy on loopback (tests/fakes/http_proxy.py), recording what it was asked.
    No proxy variable is set in the environment until the test sets one."""
    from .fakes.http_proxy import HttpProxy

    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    proxy = HttpProxy().start()
    yield proxy
    proxy.stop()


@pytest.fixture
def drain():
    """Wait until the embedded worker has run everything queued so far (what those jobs
    queue, retries and countdowns included), and the live events they sent are out."""
    from channels_app.webhook_ingest import group_commit
    from qorven.runtime.publisher import broadcast_flush
    from qorven.runtime.worker import embedded_worker

    def wait(timeout: float = 60) -> None:
        assert group_commit.flush(10), "the webhooks' tasks were not queued in time"
        if not embedded_worker.join(timeout):
            # Show where every thread is: a job that never finishes is otherwise invisible.
            faulthandler.dump_traceback(all_threads=True)
            raise AssertionError(
                f"tasks did not finish in time: {embedded_worker.pending()} (thread stacks above, on stderr)"
            )
        if not broadcast_flush(10):
            # Where the live sender's thread waits (a Redis call that never returns?).
            faulthandler.dump_traceback(all_threads=True)
            raise AssertionError("live events were not sent in time (thread stacks above, on stderr)")

    return wait


@pytest.fixture
def platform(settings):
    """One fake platform server behind every platform API base URL."""
    from .fakes.platform_server import PlatformServer

    server = PlatformServer()
    settings.TELEGRAM_API_BASE = server.url + "/telegram"
    settings.WHATSAPP_API_BASE = server.url + "/whatsapp/v21.0"
    settings.SLACK_API_BASE = server.url + "/slack/api"
    settings.DISCORD_API_BASE = server.url + "/discord/api/v10"
    settings.TWILIO_API_BASE = server.url + "/twilio"
    yield server
    server.stop()


DATABASE_FIXTURES = frozenset({"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback"})


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """The longest single tests first: a type check over the libraries' types, and the
    property tests, which try hundreds of examples (a minute or two each). pytest-django
    puts every test without the database last, and pytest-xdist hands each process one
    part of the run in order and then moves the ends of queues to processes gone idle,
    so these were started last and the others waited on them; first, the rest is spread
    around them. Only tests without the database move: pytest-django's order of those
    with it (transactional ones after the others) is kept."""
    def long_alone(item) -> bool:
        uses_database = item.get_closest_marker("django_db") is not None or bool(
            DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())))
        long = item.get_closest_marker("runs_long") is not None or getattr(
            getattr(item, "obj", None), "is_hypothesis_test", False)
        return long and not uses_database

    items[:] = sorted(items, key=lambda item: not long_alone(item))  # stable: the rest keep their order


EXIT_GRACE = 120.0  # seconds the process gets to exit once the run has reported


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """A thread a failed test left running (a loop that never closed, say) keeps Python from
    exiting, and a CI job then waits on a run that already reported. Past EXIT_GRACE the
    thread stacks go to stderr and the process exits, failed."""
    import os
    import sys
    import threading

    status = getattr(config, "_qorven_exit_status", 1)

    def watchdog() -> None:
        threading.Event().wait(EXIT_GRACE)
        sys.stderr.write(f"\nthe test run reported, but threads kept it from exiting for {EXIT_GRACE:.0f} s:\n")
        faulthandler.dump_traceback(all_threads=True)
        sys.stderr.flush()
        os._exit(int(status) or 1)

    threading.Thread(target=watchdog, name="qorven-exit-watchdog", daemon=True).start()


def pytest_sessionfinish(session, exitstatus):
    session.config._qorven_exit_status = exitstatus


def pytest_addoption(parser):
    parser.addoption("--stress", action="store_true", default=False,
                     help="run tests/reliability at full size (`make stress`)")


@pytest.fixture
def serve_once(monkeypatch):
    """`qorven serve` run in this process up to its ASGI server, which returns at once; returns what
    it printed. The server stops its worker as it ends, possibly before the sweep it queued
    at start (for what a previous run left) has run: a real server's next start sweeps
    again, and the test forgets it."""
    import io

    from django.core.management import call_command

    from qorven.runtime.worker import embedded_worker

    from .ports import free_port

    def started(server, sockets=None) -> None:  # uvicorn.Server.run, as though it served and was stopped
        server.started = True

    def run() -> str:
        monkeypatch.setattr("daphne.cli.CommandLineInterface.run", lambda self, args: None)
        monkeypatch.setattr("uvicorn.Server.run", started)
        out = io.StringIO()
        # A port free now: serve refuses one that is taken before anything starts.
        call_command("serve", "--no-migrate", "--no-beat", "--port", str(free_port()), stdout=out,
                     stderr=io.StringIO())
        embedded_worker.reset()
        return out.getvalue()

    return run


@pytest.fixture
def url_prefix(settings):
    """Qorven served under /qorven (QORVEN_URL_PREFIX=/qorven, QORVEN_PUBLIC_URL
    https://qorven.example): the settings qorven/settings.py makes of them, and the script
    prefix reverse() uses on this thread, as the server's handler sets it for each request
    (Django's test client does not); the one before is put back after."""
    from django.urls import get_script_prefix, set_script_prefix

    from qorven.runtime.url_prefix import prefix_settings, public_url_under

    before = get_script_prefix()
    for name, value in prefix_settings("/qorven").items():
        setattr(settings, name, value)
    settings.QORVEN_PUBLIC_URL = public_url_under("https://qorven.example", "/qorven")
    settings.QORVEN_PUBLIC_URL_GIVEN = True
    set_script_prefix("/qorven/")
    yield "/qorven"
    set_script_prefix(before)
