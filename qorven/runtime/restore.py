"""Putting a backup (qorven.runtime.backup) back in place of the database, losing nothing.

The database being replaced is first copied beside the backup the way `qorven backup`
copies it, so a restore of the wrong file is itself undone by restoring that copy. Then:

- SQLite: the backup, read back whole first, is copied in under a temporary name and
  takes the database file's name in one rename; the old write-ahead log goes with the old
  file (its pages belong to it, not to the backup).
- PostgreSQL: psql drops the schema's tables and runs `pg_restore`'s script in one
  transaction: the tables are replaced all at once or, on any error, not at all.

The caller applies this version's migrations after, so an older backup is brought up to date.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .backup import COUNTED, BackupError, Progress, _libpq_env, backup_write


@dataclass(frozen=True)
class RestorePlan:
    backup: Path
    counts: dict[str, int]  # what the backup holds (SQLite; empty for a dump, read after)
    kept_as: Path | None  # where the database it replaces is copied first (None: there is none)


def restore_plan(*, database: dict[str, Any], backup: Path, keep_dir: Path) -> RestorePlan:
    """Check that `backup` is a backup this database can take; say where the current one will go."""
    if not backup.is_file():
        raise BackupError(f"{backup} is not a file")
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    if _sqlite(database):
        counts = _sqlite_counts(backup)
        current = Path(database["NAME"]).exists()  # not on a new machine restoring its first backup
        return RestorePlan(backup=backup, counts=counts,
                           kept_as=keep_dir / f"qorven-before-restore-{stamp}.sqlite3" if current else None)
    listed = subprocess.run(["pg_restore", "--list", str(backup)], capture_output=True, text=True)
    holds_tenants = any("TABLE DATA" in line and " qorven_tenant " in line for line in listed.stdout.splitlines())
    if listed.returncode != 0 or not holds_tenants:
        raise BackupError(f"{backup} is not a Qorven backup made by qorven backup on PostgreSQL")
    return RestorePlan(backup=backup, counts={}, kept_as=keep_dir / f"qorven-before-restore-{stamp}.dump")


def restore_apply(*, database: dict[str, Any], plan: RestorePlan, progress: Progress) -> None:
    """Copy the current database to `plan.kept_as`, then put the backup in its place.
    Django's connections must be closed (they would go on writing to the replaced file)."""
    if plan.kept_as is not None:
        backup_write(database=database, path=plan.kept_as, progress=progress)
    if _sqlite(database):
        _sqlite_replace(Path(database["NAME"]), plan.backup)
    else:
        _postgres_replace(database, plan.backup)


def _sqlite(database: dict[str, Any]) -> bool:
    return str(database["ENGINE"]).endswith("sqlite3")


def _sqlite_counts(path: Path) -> dict[str, int]:
    try:
        copy = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            (verdict,) = copy.execute("PRAGMA quick_check").fetchone()
            if verdict != "ok":
                raise BackupError(f"{path} does not read back whole: {verdict}")
            return {label: copy.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]  # noqa: S608 (our names)
                    for label, table in COUNTED.items()}
        finally:
            copy.close()
    except sqlite3.DatabaseError:
        raise BackupError(f"{path} is not a Qorven backup made by qorven backup on SQLite") from None


def _sqlite_replace(target: Path, backup: Path) -> None:
    incoming = target.with_name(f".{target.name}.restoring")
    old_umask = os.umask(0o077)
    try:
        shutil.copyfile(backup, incoming)
    finally:
        os.umask(old_umask)
    os.chmod(incoming, 0o600)
    with open(incoming, "rb") as f:
        os.fsync(f.fileno())
    for companion in (f"{target}-wal", f"{target}-shm"):
        Path(companion).unlink(missing_ok=True)
    os.replace(incoming, target)


def _postgres_replace(database: dict[str, Any], backup: Path) -> None:
    """One transaction (psql's) drops every table of the schema, then runs pg_restore's script.

    `pg_restore --clean` drops only what the dump holds: a table a later version added stays,
    its foreign keys keep the dump's tables from being dropped (the whole restore refused), and
    without them the migrations after would find it already there. The transaction is
    committed only once pg_restore has written its whole script and exited well; anything less
    ends psql's session without a COMMIT, which rolls all of it back.
    """
    psql = shutil.which("psql")
    if psql is None:
        raise BackupError("psql was not found: install PostgreSQL's client programs "
                          "(e.g. apt install postgresql-client)")
    env = {**os.environ, **_libpq_env(database)}
    with tempfile.TemporaryFile(mode="w+") as restore_said, tempfile.TemporaryFile(mode="w+") as psql_said:
        with subprocess.Popen([psql, "--no-psqlrc", "--quiet", "--no-password", "-v", "ON_ERROR_STOP=1",
                               "-d", str(database["NAME"])],
                              env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=psql_said) as apply:
            assert apply.stdin is not None
            whole = False
            try:
                apply.stdin.write(_EMPTY_SCHEMA)
                with subprocess.Popen(["pg_restore", "--clean", "--if-exists", "--no-owner", "--file=-", str(backup)],
                                      env=env, stdout=subprocess.PIPE, stderr=restore_said) as script:
                    assert script.stdout is not None
                    shutil.copyfileobj(script.stdout, apply.stdin)
                whole = script.returncode == 0
                if whole:
                    apply.stdin.write(b"\nCOMMIT;\n")
            except BrokenPipeError:  # psql stopped at an error: nothing was committed
                pass
            finally:
                try:
                    apply.stdin.close()
                except BrokenPipeError:
                    pass
        if not whole or apply.returncode != 0:
            said = []
            for output in (restore_said, psql_said):
                output.seek(0)
                said += [line.strip() for line in output if "error" in line.lower()]
            raise BackupError("pg_restore failed, the database is as it was: " + " ".join(said[-3:])[-500:])


# The start of the restore's transaction: the schema's tables go (a later version's among
# them, which the backup does not hold); the dump's own --clean drops its other objects.
_EMPTY_SCHEMA = b"""SET client_min_messages = warning;
BEGIN;
DO $$
DECLARE name text;
BEGIN
    FOR name IN SELECT tablename FROM pg_tables WHERE schemaname = current_schema() LOOP
        EXECUTE format('DROP TABLE IF EXISTS %I CASCADE', name);
    END LOOP;
END $$;
"""
