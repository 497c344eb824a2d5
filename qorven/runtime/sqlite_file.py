"""The embedded default's database file is its owner's alone.

It holds the bindings' bot tokens and webhook secrets, the hosts' model keys and every
conversation; SQLite creates it (and its -wal and -shm companions) with the process's
umask, usually readable by every account on the machine. Each new connection makes sure
the files are not (once per file and process: a stat each, then nothing).
"""
from __future__ import annotations

import logging
import os
import stat
from typing import Any

logger = logging.getLogger(__name__)
_done: set[str] = set()


def sqlite_files_private(sender: Any, connection: Any, **kwargs: Any) -> None:
    """`connection_created` receiver: the SQLite files of `connection`, owner-only."""
    if connection.vendor != "sqlite":
        return
    name = str(connection.settings_dict.get("NAME") or "")
    if not name or name == ":memory:" or name.startswith("file:") or name in _done:
        return
    for path in (name, f"{name}-wal", f"{name}-shm"):
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
            if mode & 0o077:
                os.chmod(path, mode & 0o700)
        except FileNotFoundError:
            continue  # the -wal and -shm files come and go with the connections
        except OSError as exc:  # not ours to change (another account's file): say so once
            logger.warning("could not make %s private to its owner: %s", path, exc)
    _done.add(name)
