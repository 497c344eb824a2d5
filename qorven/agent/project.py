"""A Qor's project context: the text field, or the project file of its project folder.

A Qor whose project folder is set (by the host's superusers: it is a path on the server)
reads AGENTS.md there, else CLAUDE.md, else README.md, into the prompt's project context:
at most QORVEN_PROJECT_FILE_CHARS characters, read again only when the file changes (its
modification time or size), so a busy Qor does not read the disk on every turn. It sits
near the top of the prompt, before anything that changes from turn to turn, so a
provider's prompt cache keeps it. With no folder, or no such file in it, the Qor's
project-context text is used.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path

from django.conf import settings

from tenancy.models import Qor

logger = logging.getLogger(__name__)

PROJECT_FILES = ("AGENTS.md", "CLAUDE.md", "README.md")
TRUNCATED = "\n[… the rest of {name} is left out]"

_lock = threading.Lock()
_read: dict[Path, tuple[int, int, str]] = {}  # path → (mtime_ns, size, text as read)


def project_context_for(qor: Qor) -> str:
    """The project context a prompt of `qor` carries."""
    if qor.project_folder.strip():
        text = _project_file(Path(qor.project_folder.strip()))
        if text is not None:
            return text
    return qor.project_context


def _project_file(folder: Path) -> str | None:
    for name in PROJECT_FILES:
        path = folder / name
        try:
            stat = path.stat()
        except OSError:
            continue
        if not path.is_file():
            continue
        key = (stat.st_mtime_ns, stat.st_size)
        known = _read.get(path)
        if known is not None and known[:2] == key:
            return known[2]
        limit = max(settings.QORVEN_PROJECT_FILE_CHARS, 0)
        try:
            with path.open(encoding="utf-8", errors="replace") as handle:
                text = handle.read(limit + 1)
        except OSError as exc:
            logger.warning("could not read the project file %s: %s", path, exc)
            continue
        if len(text) > limit:
            text = text[:limit] + TRUNCATED.format(name=name)
        with _lock:
            _read[path] = (*key, text)
        return text
    return None
