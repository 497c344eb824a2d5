"""Django's DATABASES entry Qorven runs with, from the URL in a variable: PostgreSQL or
SQLite, each with its options."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import environ

from .addresses import url_without_credentials

if TYPE_CHECKING:
    from .reader import Env


def database_settings(env: Env, var: str, default: str, *, root: Path) -> dict:
    """Env.database: the entry for the URL in `var` (see there)."""
    try:
        database = env.db_url(var, default=default)
    except ValueError:  # urllib's, for a port that is not a number
        database = {}
    if database.get("ENGINE") == "django.db.backends.sqlite3":
        database["NAME"] = _sqlite_file(var, str(database.get("NAME") or ""), root)
        # BEGIN IMMEDIATE takes SQLite's write lock at the start of every transaction, so
        # concurrent appends queue up instead of failing with "database is locked".
        # secure_delete: what is deleted is overwritten, not left in the file's free space
        # (qorven.runtime.sqlite_erase).
        database.setdefault("OPTIONS", {}).update({
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA secure_delete=ON;",
        })
        # A file, not shared-cache memory, so threads in tests see the same locking as
        # production; one per test process, so concurrent runs never share it.
        database["TEST"] = {"NAME": str(Path(tempfile.gettempdir()) / f"qorven-test-{os.getpid()}.sqlite3")}
        return database
    if database.get("ENGINE") != "django.db.backends.postgresql":
        raise environ.ImproperlyConfigured(f"{var} must be a postgres:// or sqlite:// URL (e.g. "
                                           f"postgres://user:pass@host:5432/qorven), not {url_without_credentials(env.str(var))!r}")
    # Django's backend, with a look at each pooled connection before it is used
    # (qorven.runtime.postgresql.base).
    database["ENGINE"] = "qorven.runtime.postgresql"
    if env.bool("QORVEN_DB_PREPARED", default=True):
        # A statement run on a connection five times is prepared there (psycopg), so
        # PostgreSQL stops planning it on each run: the reads every request and turn make
        # (qorven.runtime.prepared_read) took longer to plan than to run. Prepared statements
        # need the parameters bound by the server. Off for a pooler that does not keep them
        # (PgBouncer before 1.21 in transaction mode).
        database.setdefault("OPTIONS", {}).update({"server_side_binding": True, "prepare_threshold": 5})
    if env.bool("QORVEN_DB_POOL", default=True):
        # psycopg's pool: under an ASGI server every request runs on a thread of its own, so a
        # connection per request (CONN_MAX_AGE=0) or per thread (CONN_MAX_AGE>0, which
        # exhausts the server) is replaced by a bounded set that requests borrow and return.
        # `qorven worker` closes it before forking its children (each opens its own).
        pool = {"min_size": env.int("QORVEN_DB_POOL_MIN", default=2, at_least=0),
                "max_size": env.int("QORVEN_DB_POOL_MAX", default=20, at_least=1),
                "timeout": env.float("QORVEN_DB_POOL_TIMEOUT", default=10.0, above=0)}
        if pool["min_size"] > pool["max_size"]:
            raise environ.ImproperlyConfigured(f"QORVEN_DB_POOL_MIN ({pool['min_size']}) must be at most "
                                               f"QORVEN_DB_POOL_MAX ({pool['max_size']})")
        database["CONN_MAX_AGE"] = 0
        database.setdefault("OPTIONS", {})["pool"] = pool
    return database


def _sqlite_file(var: str, name: str, root: Path) -> str:
    """The SQLite file `name` names, relative to `root`; ImproperlyConfigured when its folder
    does not exist (SQLite makes the file, not the folder: every command would end in
    "unable to open database file", naming nothing)."""
    if name in ("", ":memory:") or name.startswith("file:"):
        return name
    path = Path(name) if Path(name).is_absolute() else (root / name).resolve()
    if not path.parent.is_dir():
        relative = "" if Path(name).is_absolute() else f" (a relative path is taken from the project root, {root})"
        raise environ.ImproperlyConfigured(
            f"{var} names the SQLite file {path}, in a folder that does not exist{relative}: "
            f"create {path.parent} or name another file")
    return str(path)
