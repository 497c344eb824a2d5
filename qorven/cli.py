"""The `qorven` console command: Qorven's management commands first, hyphenated names
(`qorven collapse-sessions`, also in each command's usage line), Django's commands after
them."""
from __future__ import annotations

import os
import sys

# The apps whose commands are Qorven's own (the rest are Django's and libraries').
OWN_APPS = ("qorven", "tenancy", "qorven.runtime", "qorven.agent", "sessions_app", "memory_app", "heartbeats_app",
            "legacy_app", "channels_app")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    if argv[1:] == ["--version"]:  # Qorven's, not Django's
        print(f"qorven {_version()}")
        return 0
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qorven.settings")
    if _command_name(argv) not in SERVERS:
        # A one-off command runs its queries on one thread: psycopg's pool would open
        # connections it never lends and, with the database down, log a warning per try
        # for its 10 s wait before the command could say why in a line. An operator's
        # own QORVEN_DB_POOL stands.
        os.environ.setdefault("QORVEN_DB_POOL", "false")
    from django.core.exceptions import ImproperlyConfigured
    from django.db import DatabaseError

    try:
        return _run(argv)
    except ImproperlyConfigured as exc:  # a setting is missing or malformed: say which, no traceback
        print(f"qorven: configuration error: {exc}", file=sys.stderr)
        return 2
    except DatabaseError as exc:
        refused = _connection_refused(exc)
        if refused:  # a wrong host, port, name or password in DATABASE_URL, or the server down
            from qorven.runtime.database import database_named

            print(f"qorven: cannot connect to the database, {database_named()} ({refused}): check DATABASE_URL and "
                  "that the database server is up", file=sys.stderr)
            return 1
        # Not for migrate itself, nor serve (which migrates first): a migration that fails
        # leaves migrations unapplied, and "run qorven migrate" would send the host round.
        unmigrated = _unmigrated() if _missing_table(exc) and argv[1:2] not in (["migrate"], ["serve"]) else ""
        if not unmigrated:
            raise
        # A table missing because its migration never ran (a new database: `make run` and
        # `qorven serve` migrate, the other commands do not): say so, not a traceback.
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]  # PostgreSQL's goes on to quote the SQL
        print(f"qorven: the database, {unmigrated}, is not migrated ({first}): run `qorven migrate` first "
              "(`qorven serve` also applies migrations as it starts)", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `qorven --help | head`: the reader has what it wanted. Python would otherwise
        # print the error again flushing stdout as it exits.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _run(argv: list[str]) -> int:
    import django
    from django.core.management import ManagementUtility, execute_from_command_line, get_commands

    django.setup()  # before get_commands(), which caches what the installed apps offer
    if argv[1:] in ([], ["help"], ["-h"], ["--help"]):
        print(_overview(get_commands()), flush=True)
        return 0
    if len(argv) == 3 and argv[1] == "help" and not argv[2].startswith("-"):
        argv = [argv[0], argv[2], "--help"]  # `qorven help collapse-sessions`, by the name the docs give
    name = _command_name(argv)
    if name in REFUSED:
        print(REFUSED[name](argv), file=sys.stderr)
        return 1
    commands = get_commands()
    if name in commands and commands[name] in _own_app_names():
        command = ManagementUtility([argv[0], name]).fetch_command(name)
        command.get_version = lambda: f"qorven {_version()}"  # its --version: Qorven's, not Django's
        from qorven.runtime.command_refusal import plain_refusals

        plain_refusals(command)
        # The usage line shows the name as typed in the docs: `qorven import-legacy`.
        command.run_from_argv(["qorven", name.replace("_", "-"), *argv[2:]])
        return 0
    if name:
        argv[1] = name
    execute_from_command_line(argv)
    return 0


# The commands that serve many requests or tasks at once, each on a thread of its own,
# from one process: they share psycopg's pool (QORVEN_DB_POOL).
SERVERS = frozenset({"serve", "worker", "beat", "discord_gateway"})


def _command_name(argv: list[str]) -> str:
    """The command `argv` runs, as Django names it ("collapse_sessions"), "" for none."""
    return argv[1].replace("-", "_") if len(argv) > 1 and not argv[1].startswith("-") else ""


def _runserver_refused(argv: list[str]) -> str:
    """Why `runserver` does not start, and the `serve` that serves the same address.
    Django's runserver is a WSGI server: the pages load but the chat page's WebSocket gets a
    404, and no heartbeat fires (the embedded beat is `serve`'s)."""
    from django.core.management.commands.runserver import naiveip_re

    program = _program(argv)
    serve = f"{program} serve"
    given = [arg for arg in argv[2:] if not arg.startswith("-")]
    address = naiveip_re.match(given[0]) if given else None
    if address:
        host = address["addr"] or ""
        serve += (f" --host {host.strip('[]')}" if host else "") + f" --port {address['port']}"
    return (f"{program} runserver is Django's development server, which serves no WebSockets (the chat page "
            "loads but never goes live) and fires no heartbeats. Serve Qorven, pages and live chat, "
            f"with: {serve}   (`make run` does, on the embedded default)")


def _program(argv: list[str]) -> str:
    return "python manage.py" if os.path.basename(argv[0]) == "manage.py" else "qorven"


def _testserver_refused(argv: list[str]) -> str:
    return (f"{_program(argv)} testserver is Django's development server on a test database, which serves no "
            "WebSockets and fires no heartbeats. Serve Qorven with: "
            f"{_program(argv)} serve   (`make run` does, on the embedded default)")


def _runworker_refused(argv: list[str]) -> str:
    return (f"{_program(argv)} runworker runs Channels' worker for channel-layer consumers, of which Qorven has "
            f"none: it would answer nothing. The worker that runs turns and sends replies is: {_program(argv)} "
            "worker   (on the embedded default `serve` runs them itself)")


# Django's and Channels' commands that would run a half-working Qorven (or nothing of it),
# refused with what to run instead.
REFUSED = {"runserver": _runserver_refused, "testserver": _testserver_refused, "runworker": _runworker_refused}


def _missing_table(exc: Exception) -> bool:
    """Whether the error is a table the database does not have (SQLite's words, or
    PostgreSQL's undefined_table)."""
    return "no such table" in str(exc) or getattr(exc.__cause__, "sqlstate", None) == "42P01"


def _connection_refused(exc: Exception) -> str:
    """Why PostgreSQL refuses a connection, when that is what ended the command, else ""."""
    from django.db import OperationalError

    from qorven.runtime.database import connection_refusal

    return connection_refusal() if isinstance(exc, OperationalError) else ""


def _unmigrated() -> str:
    """The database's name when migrations of it are still to apply, else ""."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    try:
        executor = MigrationExecutor(connection)
        if not executor.migration_plan(executor.loader.graph.leaf_nodes()):
            return ""
    except Exception:  # the database cannot even be asked: the first error is the one to show
        return ""
    from qorven.runtime.database import database_named

    return database_named()


def _own_app_names() -> set[str]:
    from django.apps import apps

    return {config.name for config in apps.get_app_configs() if config.name in OWN_APPS}


def _overview(commands: dict[str, str]) -> str:
    own = _own_app_names()
    mine = sorted(name for name, app in commands.items() if app in own)
    theirs = sorted(name for name, app in commands.items() if app not in own)
    lines = ["Usage: qorven <command> [options]   (`qorven <command> --help` explains each)", "",
             "Qorven's commands:"]
    lines += [f"  {name.replace('_', '-'):<18} {_summary(name)}" for name in mine]
    theirs = [name for name in theirs if name not in REFUSED]
    lines += ["", "Django's commands (also available):", "  " + ", ".join(theirs), "",
              "qorven --version prints the version."]
    return "\n".join(lines)


def _summary(name: str) -> str:
    from django.core.management import ManagementUtility

    text = " ".join(str(ManagementUtility(["qorven", name]).fetch_command(name).help).split())
    first = text.split(". ")[0].split(": ")[0]
    return first if len(first) <= 90 else first[:87] + "…"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("qorven")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"
