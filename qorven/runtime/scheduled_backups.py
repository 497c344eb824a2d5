"""Backups taken on the host's schedule (QORVEN_BACKUP_SCHEDULE) into one directory
(QORVEN_BACKUP_DIR), the newest QORVEN_BACKUP_KEEP of them kept.

Each is a `qorven backup` (qorven.runtime.backup) named `qorven-scheduled-<UTC time>` with
the database's suffix. Rotation only ever removes files of exactly that name: whatever
else the directory holds (a backup taken by hand, a copy being made by another tool) is
not ours to delete. The one just made is never removed, and a run that failed removes
nothing, so a broken schedule never eats the backups it leaves behind.

A run holds an exclusive lock on a file in the directory for as long as it writes
(flock: released by the system when its process dies, however it dies), so a second run
at the same time — a second beat's, a slow dump outlasting its period — writes nothing.
Nor does a run that waited behind one that ended past the schedule's next time (the beat
sends the times with it): runs sent while a long one held every worker are dropped, not
taken one after another. That is judged by the beat's times and how long the long one
took, never by the worker's clock against the beat's, which may disagree. A run whose
worker died leaves the lock file written (a run empties it as it ends): the next run
records it as skipped. The outcome of the last run is kept beside the backups
(`.qorven-backup-status.json`), and the last run skipped (`.qorven-backup-skipped.json`),
for `qorven doctor` and `qorven backup --list` to show; a failure is logged.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .backup import BackupError, backup_write

logger = logging.getLogger(__name__)

# Celery beat sends it by this name (qorven.runtime.tasks): the host-wide PeriodicTask synced
# from QORVEN_BACKUP_SCHEDULE (heartbeats_app.services.backup_beat_sync) carries it.
BACKUP_TASK = "qorven.runtime.backup"
PREFIX = "qorven-scheduled-"
STAMP = "%Y%m%d-%H%M%S"
NAME = re.compile(r"qorven-scheduled-(\d{8}-\d{6})\.(?:sqlite3|dump)")
PARTIAL = re.compile(r"\.qorven-scheduled-\d{8}-\d{6}\.(?:sqlite3|dump)\.partial")
LOCK_FILE = ".qorven-backup.lock"
STATUS_FILE = ".qorven-backup-status.json"
SKIP_FILE = ".qorven-backup-skipped.json"
# Why a run was skipped: another run held the directory; no worker took it in its period;
# its worker stopped while it wrote (the broker does not hand an acknowledged run out again).
RUNNING, LATE, LOST = "running", "late", "lost"
ERROR_CHARS = 500
# What to do about a directory that cannot be read, said by `qorven backup --list` and doctor.
UNREADABLE_FIX = ("as the user the worker runs as (who writes the backups), and check that QORVEN_BACKUP_DIR names "
                  "the directory the worker writes them to")


class BackupDirError(Exception):
    """The directory cannot hold backups, or cannot be read; the message says why."""


@dataclass(frozen=True)
class ScheduledBackup:
    path: Path
    taken_at: datetime  # when it was begun (UTC), from its name
    size: int  # bytes


@dataclass(frozen=True)
class LastRun:
    """What the last scheduled run that got to write did."""

    at: datetime  # when it began, by its worker's clock
    ok: bool
    file: str = ""  # the backup it made
    error: str = ""  # why it failed
    due: datetime | None = None  # the schedule's time it was for, by the beat's clock (None: sent without one)
    took: float = 0.0  # seconds from its beginning to its end, by its worker's clock

    def ended_after(self) -> datetime | None:
        """A time by the beat's clock that had passed when this run ended: it began at or
        after its `due`, and took `took`. Comparing the worker's clock with the beat's
        would skip every run when they disagree by a period; a duration needs no agreement."""
        return self.due + timedelta(seconds=self.took) if self.due is not None else None


@dataclass(frozen=True)
class Skip:
    """The last scheduled run that wrote nothing, and why."""

    at: datetime  # when it was skipped
    due: datetime  # the schedule's time it was for (when it was skipped, if sent without one)
    why: str  # RUNNING, LATE or LOST
    # RUNNING: when the other run began; LATE: the next time it let pass; LOST: when it began
    since: datetime | None = None

    def describe(self, when: Callable[[datetime], str]) -> str:
        """What happened, with times as `when` writes them."""
        if self.why == LOST and self.since is not None:
            return (f"the run due at {when(self.due)}, begun at {when(self.since)}, did not finish: its worker "
                    "stopped while writing it (killed, or past its time limit)")
        if self.why == LATE and self.since is not None:
            reason = f"no worker took it before {when(self.since)}, the schedule's next time"
        else:
            began = f", begun at {when(self.since)}," if self.since is not None else ""
            reason = f"another backup{began} was still being written"
        return f"the run due at {when(self.due)} was skipped: {reason}"


@dataclass(frozen=True)
class Outcome:
    taken: ScheduledBackup | None = None
    removed: tuple[str, ...] = ()
    skipped: str = ""  # why nothing was done (another run holds the directory)
    error: str = ""

    def summary(self) -> str:
        if self.taken is not None:
            gone = f"; removed {len(self.removed)} older" if self.removed else ""
            return f"backed up to {self.taken.path} ({self.taken.size:,} bytes){gone}"
        return f"skipped: {self.skipped}" if self.skipped else f"failed: {self.error}"


def backup_dir_prepare(directory: Path) -> None:
    """Make `directory` (owner-only when it is made here) and prove that a file can be
    written in it and that it can be listed (rotation lists it, and so do `qorven backup
    --list` and doctor, run as the worker's user); BackupDirError saying why not."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise BackupDirError(f"{directory} cannot be made: {exc.strerror or exc}") from None
    if not directory.is_dir():
        raise BackupDirError(f"{directory} is not a directory")
    fix = (f"the user the worker runs as must be able to read and write it: make it theirs, e.g. "
           f"chown <that user> {directory} && chmod u+rwx {directory}")
    probe = directory / f".qorven-write-test-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        probe.unlink()
    except OSError as exc:
        raise BackupDirError(f"{directory} cannot be written: {exc.strerror or exc}; {fix}") from None
    try:
        with os.scandir(directory) as entries:
            next(entries, None)
    except OSError as exc:
        raise BackupDirError(f"{directory} cannot be read: {exc.strerror or exc}; {fix}") from None


def scheduled_backups(directory: Path) -> list[ScheduledBackup]:
    """The scheduled backups in `directory`, newest first (none when it does not exist
    yet); BackupDirError when it cannot be read."""
    found = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    except OSError as exc:  # another user's (runs make it owner-only), a file on its path
        raise BackupDirError(f"{directory} cannot be read: {exc.strerror or exc}") from None
    for entry in entries:
        match = NAME.fullmatch(entry.name)
        if match is None or not entry.is_file(follow_symlinks=False):
            continue
        try:
            taken_at = datetime.strptime(match.group(1), STAMP).replace(tzinfo=UTC)
            size = entry.stat(follow_symlinks=False).st_size
        except (ValueError, FileNotFoundError):  # 20261399-…: not a time; gone meanwhile
            continue
        except OSError as exc:  # listed, but its files cannot be looked at
            raise BackupDirError(f"{directory} cannot be read: {exc.strerror or exc}") from None
        found.append(ScheduledBackup(path=Path(entry.path), taken_at=taken_at, size=size))
    return sorted(found, key=lambda backup: backup.path.name, reverse=True)


def last_run(directory: Path) -> LastRun | None:
    """The outcome of the last scheduled run that wrote in `directory`, if one is recorded."""
    try:
        data = json.loads((directory / STATUS_FILE).read_text())
        return LastRun(at=datetime.fromisoformat(data["at"]), ok=bool(data["ok"]), file=str(data.get("file", "")),
                       error=str(data.get("error", "")),
                       due=datetime.fromisoformat(data["due"]) if data.get("due") else None,
                       took=float(data.get("took") or 0.0))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def last_skip(directory: Path) -> Skip | None:
    """The last scheduled run in `directory` that was skipped, if one is recorded."""
    try:
        data = json.loads((directory / SKIP_FILE).read_text())
        since = datetime.fromisoformat(data["since"]) if data.get("since") else None
        return Skip(at=datetime.fromisoformat(data["at"]), due=datetime.fromisoformat(data["due"]),
                    why=str(data["why"]), since=since)
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextmanager
def backup_dir_lock(directory: Path, *, began: datetime, due: datetime | None = None) -> Iterator[bool]:
    """Hold the directory's lock while the block runs: True when it was free, False (and
    nothing held) when another run has it. The holder writes in the lock file when it
    began and the schedule's time it is for, and empties it as it lets go: a run that finds
    it held says which one it gave way to, or sees that it is a copy of that very run, and
    one that finds it free but written follows a run whose worker died, and records that."""
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        lost_began, lost_due = _holder_read(os.pread(fd, 4096, 0))
        if lost_began is not None and lost_began not in _ended(directory):
            _skipped(directory, Skip(at=lost_began, due=lost_due or lost_began, why=LOST, since=lost_began))
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"began": began.isoformat(), "due": due.isoformat() if due else None}).encode(), 0)
        try:
            yield True
        finally:
            os.ftruncate(fd, 0)  # ended, however it ended: nothing of it is being written now
    finally:
        os.close(fd)  # lets go of the lock


def _ended(directory: Path) -> set[datetime]:
    """When the runs recorded as ended began: a lock file written by a version that did not
    empty it names one of them, not a run that died."""
    last, skip = last_run(directory), last_skip(directory)
    return {record.at for record in (last, skip) if record is not None}


def _holder(directory: Path) -> tuple[datetime | None, datetime | None]:
    """When the run holding the lock began, and the time it is for (None: not known)."""
    try:
        return _holder_read((directory / LOCK_FILE).read_bytes())
    except OSError:
        return None, None


def _holder_read(written: bytes) -> tuple[datetime | None, datetime | None]:
    try:  # empty while the holder writes it, and once it let go
        data = json.loads(written)
        return (datetime.fromisoformat(data["began"]),
                datetime.fromisoformat(data["due"]) if data.get("due") else None)
    except (ValueError, KeyError, TypeError):
        return None, None


def scheduled_backup_take(*, database: dict[str, Any], directory: Path, keep: int, now: datetime | None = None,
                          tick: datetime | None = None, next_tick: datetime | None = None) -> Outcome:
    """Back the database up into `directory`, then remove the oldest scheduled backups
    beyond the newest `keep` (0: keep them all). `tick` is the schedule's time the run is
    for and `next_tick` the one after, both by the beat's clock: a run that waited behind
    one that ended at or after `next_tick` is skipped (its successor is due), and a copy of
    a run already begun for `tick` does nothing. Never raises: a failure, or a skip, is
    logged and recorded for `qorven doctor`, and nothing is removed. `now` (by the worker's
    clock) names the backup and is never compared with the beat's times."""
    now = now or datetime.now(UTC)
    try:
        backup_dir_prepare(directory)
    except BackupDirError as exc:
        logger.error("scheduled backup failed: %s", exc)
        return Outcome(error=str(exc))
    with backup_dir_lock(directory, began=now, due=tick) as held:
        if not held:
            began, due = _holder(directory)
            if tick is not None and due == tick:
                # The same run again (sent by a second beat, or delivered again by the broker
                # while a busy worker held it unstarted): it is being done, nothing was skipped.
                logger.info("scheduled backup: the run due at %s is already being written", tick.isoformat())
                return Outcome(skipped=f"the run due at {tick.isoformat()} is already being written")
            return _skipped(directory, Skip(at=now, due=tick or now, why=RUNNING, since=began))
        last = last_run(directory)
        if tick is not None and last is not None and last.due is not None and last.due >= tick:
            logger.info("scheduled backup: the run due at %s was already begun at %s", tick.isoformat(),
                        last.at.isoformat())
            return Outcome(skipped=f"the run due at {tick.isoformat()} was already begun at {last.at.isoformat()}")
        ended = last.ended_after() if last is not None else None
        if next_tick is not None and ended is not None and ended >= next_tick:
            return _skipped(directory, Skip(at=now, due=tick or now, why=LATE, since=next_tick))
        suffix = "sqlite3" if str(database["ENGINE"]).endswith("sqlite3") else "dump"
        path = directory / f"{PREFIX}{now.astimezone(UTC):{STAMP}}.{suffix}"
        if path.exists():
            return Outcome(skipped=f"{path.name} was taken this very second")
        _partials_remove(directory)
        try:
            result = backup_write(database=database, path=path, progress=lambda done, total: None)
        except Exception as exc:
            error = (str(exc) if isinstance(exc, BackupError) else f"{type(exc).__name__}: {exc}")[:ERROR_CHARS]
            logger.error("scheduled backup failed, nothing was removed: %s", error,
                         exc_info=not isinstance(exc, BackupError))
            _status_write(directory, LastRun(at=now, ok=False, error=error, due=tick, took=_since(now)))
            return Outcome(error=error)
        removed = _rotate(directory, keep=keep, made=path)
        _status_write(directory, LastRun(at=now, ok=True, file=path.name, due=tick, took=_since(now)))
        taken = ScheduledBackup(path=path, taken_at=now, size=result.size)
        logger.info("scheduled backup: %s (%s bytes); %s older removed", path, f"{result.size:,}", len(removed))
        return Outcome(taken=taken, removed=tuple(removed))


def _skipped(directory: Path, skip: Skip) -> Outcome:
    said = skip.describe(lambda moment: f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC")
    logger.warning("scheduled backup skipped in %s: %s", directory, said)
    _record_write(directory / SKIP_FILE, {"at": skip.at.isoformat(), "due": skip.due.isoformat(), "why": skip.why,
                                          "since": skip.since.isoformat() if skip.since else None})
    return Outcome(skipped=said)


def _since(began: datetime) -> float:
    """Seconds since `began`, by this worker's clock (which named the backup at `began`)."""
    return max((datetime.now(UTC) - began).total_seconds(), 0.0)


def _rotate(directory: Path, *, keep: int, made: Path) -> list[str]:
    """Remove the scheduled backups beyond the newest `keep`, the one just `made` counted
    among them and never removed (a clock set back, a file claiming a later time)."""
    if keep <= 0:
        return []
    try:
        listed = scheduled_backups(directory)
    except BackupDirError as exc:
        logger.warning("scheduled backup: none removed: %s", exc)
        return []
    others = [backup for backup in listed if backup.path.name != made.name]
    removed = []
    for backup in others[keep - 1:]:
        try:
            backup.path.unlink()
            removed.append(backup.path.name)
        except OSError as exc:
            logger.warning("scheduled backup: %s could not be removed: %s", backup.path, exc.strerror or exc)
    return removed


def _partials_remove(directory: Path) -> None:
    """Remove what a run killed mid-copy left (its process died holding the lock we hold
    now, so nothing is writing them)."""
    for entry in os.scandir(directory):
        if PARTIAL.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            Path(entry.path).unlink(missing_ok=True)


def _status_write(directory: Path, run: LastRun) -> None:
    _record_write(directory / STATUS_FILE, {"at": run.at.isoformat(), "ok": run.ok, "file": run.file,
                                            "error": run.error, "due": run.due.isoformat() if run.due else None,
                                            "took": run.took})


def _record_write(path: Path, data: dict[str, Any]) -> None:
    # Whole or not at all (a reader never sees half), and two writers at once each
    # through a file of their own.
    incoming = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        fd = os.open(incoming, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(incoming, path)
    except OSError as exc:
        logger.warning("scheduled backup: its outcome could not be recorded in %s: %s", path, exc.strerror or exc)
