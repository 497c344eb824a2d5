"""A consistent copy of the whole database, taken while Qorven keeps serving.

Everything Qorven keeps is in its database: conversations, attachments, memories, heartbeats,
bindings with their bot tokens and webhook secrets, the hosts' model keys. A copy is
therefore as private as the database itself: it is written owner-only, under a temporary
name, and takes its final name only once it is complete and has been read back.

- SQLite: `VACUUM INTO` reads the database in one transaction, a snapshot the server's
  writes (WAL) do not disturb, and writes a compact copy; SQLite's page-by-page backup
  would start over each time another process writes, which a busy server always does.
- PostgreSQL: `pg_dump`'s custom format (restored with `pg_restore`), one snapshot too; the
  password goes to it in its environment, never on its command line.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Progress = Callable[[int, int], None]  # (done, total), in bytes or tables


class BackupError(Exception):
    """The copy could not be made; nothing was left under the asked name."""


@dataclass(frozen=True)
class BackupResult:
    path: Path
    size: int  # bytes
    # Rows of the tables people care about: read back from the copy on SQLite, counted as
    # the dump began on PostgreSQL.
    counts: dict[str, int]


# Read back from a copy, to say what it holds (tables by their Django names).
COUNTED = {
    "tenants": "qorven_tenant",
    "people": "auth_user",
    "conversations": "sessions_app_session",
    "messages": "sessions_app_message",
    "memories": "memory_app_memory",
    "heartbeats": "heartbeats_app_heartbeat",
}


# What one of each counted thing is called (COUNTED names them plural).
_ONE = {"tenants": "tenant", "people": "person", "conversations": "conversation", "messages": "message",
        "memories": "memory", "heartbeats": "heartbeat"}


def counts_said(counts: dict[str, int]) -> str:
    """What a database holds, as a person reads it: `1 tenant, 3 people, 12 messages, …`."""
    return ", ".join(f"{count:,} {_ONE.get(label, label) if count == 1 else label}" for label, count in counts.items())


def database_counts() -> dict[str, int]:
    """What the database in use holds now, counted as a backup counts it."""
    from django.db import connections

    with connections["default"].cursor() as cursor:
        counts = {}
        for label, table in COUNTED.items():
            cursor.execute(f'SELECT count(*) FROM "{table}"')  # noqa: S608 (our names)
            counts[label] = cursor.fetchone()[0]
    return counts


def backup_write(*, database: dict[str, Any], path: Path, progress: Progress) -> BackupResult:
    """Copy the database `database` (a settings.DATABASES entry) to `path`, which must not exist."""
    if path.exists():
        raise BackupError(f"{path} already exists; name another file or remove it first")
    if not path.parent.is_dir():
        raise BackupError(f"{path.parent} is not a directory")
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)
    try:
        if database["ENGINE"].endswith("sqlite3"):
            counts = _sqlite(Path(database["NAME"]), partial, progress)
        elif database["ENGINE"].endswith("postgresql"):
            counts = _postgres(database, partial, progress)
        else:
            raise BackupError(f"no backup for the database engine {database['ENGINE']}")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return BackupResult(path=path, size=path.stat().st_size, counts=counts)


def _private(path: Path) -> None:
    """Create `path` empty and owner-only, before anything secret is written to it."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    os.chmod(path, 0o600)  # whatever the umask left


def _sqlite(source: Path, partial: Path, progress: Progress) -> dict[str, int]:
    if not source.exists():
        raise BackupError(f"the database file {source} does not exist")
    reader = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    try:
        (page_size,), (pages,), (free,) = (reader.execute(f"PRAGMA {p}").fetchone()
                                           for p in ("page_size", "page_count", "freelist_count"))
        total = max(page_size * (pages - free), 1)
        # VACUUM INTO refuses to write into an existing file, even an empty owner-only one,
        # so the process's umask keeps the file it makes owner-only from its first byte.
        done = threading.Event()
        watcher = threading.Thread(target=_watch, args=(partial, total, progress, done), daemon=True)
        watcher.start()
        old_umask = os.umask(0o077)
        try:
            reader.execute("VACUUM INTO ?", (str(partial),))
        except sqlite3.Error as exc:
            raise BackupError(f"SQLite could not copy the database: {exc}") from None
        finally:
            os.umask(old_umask)
            done.set()
            watcher.join()
    finally:
        reader.close()
    os.chmod(partial, 0o600)
    copy = sqlite3.connect(f"file:{partial}?mode=ro", uri=True)
    try:
        (verdict,) = copy.execute("PRAGMA quick_check").fetchone()
        if verdict != "ok":
            raise BackupError(f"the copy did not read back whole: {verdict}")
        counts = {label: copy.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]  # noqa: S608 (our names)
                  for label, table in COUNTED.items()}
    finally:
        copy.close()
    progress(total, total)
    return counts


def _watch(partial: Path, total: int, progress: Progress, done: threading.Event) -> None:
    """Report the copy's growth until it is done (VACUUM INTO says nothing while it works)."""
    while not done.wait(0.25):
        try:
            progress(min(partial.stat().st_size, total), total)
        except FileNotFoundError:
            continue


def _postgres(database: dict[str, Any], partial: Path, progress: Progress) -> dict[str, int]:
    pg_dump = shutil.which("pg_dump")
    if pg_dump is None:
        raise BackupError("pg_dump was not found: install PostgreSQL's client programs "
                          "(of the server's major version or newer), e.g. apt install postgresql-client")
    env = {**os.environ, **_libpq_env(database)}
    tables = _postgres_tables(database)
    _private(partial)
    command = [pg_dump, "--format=custom", "--verbose", "--no-password", f"--file={partial}"]
    # The dump says "dumping contents of table …" once a table: that is its progress.
    with subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as dump:
        assert dump.stderr is not None
        said: list[str] = []
        dumped = 0
        for line in dump.stderr:
            if "dumping contents of table" in line:
                dumped += 1
                progress(min(dumped, len(tables)), len(tables))
            elif "error" in line.lower() or "fatal" in line.lower():
                said.append(line.strip())
        if dump.wait() != 0:
            raise BackupError("pg_dump failed: " + (" ".join(said[-3:]) or f"exit status {dump.returncode}"))
    os.chmod(partial, 0o600)
    listed = subprocess.run(["pg_restore", "--list", str(partial)], env=env, capture_output=True, text=True)
    if listed.returncode != 0:
        raise BackupError(f"the dump did not read back: {listed.stderr.strip()[-300:]}")
    progress(len(tables), len(tables))
    return {label: tables.get(table, 0) for label, table in COUNTED.items()}


def _libpq_env(database: dict[str, Any]) -> dict[str, str]:
    """How pg_dump and pg_restore reach the database: libpq's variables, the password
    among them (never on a command line, where every account on the machine reads it)."""
    values = {"PGHOST": database.get("HOST"), "PGPORT": database.get("PORT"), "PGUSER": database.get("USER"),
              "PGPASSWORD": database.get("PASSWORD"), "PGDATABASE": database.get("NAME")}
    return {key: str(value) for key, value in values.items() if value}


def _postgres_tables(database: dict[str, Any]) -> dict[str, int]:
    """The database's tables with their rows, as it stands before the dump."""
    from django.db import connections

    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        names = [row[0] for row in cursor.fetchall()]
        counts = {}
        for name in names:
            if name in COUNTED.values():
                cursor.execute(f'SELECT count(*) FROM "{name}"')  # noqa: S608 (names from the catalog)
                counts[name] = cursor.fetchone()[0]
            else:
                counts[name] = 0
    return counts
