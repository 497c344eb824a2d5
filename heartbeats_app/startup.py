"""What the long-running processes do with heartbeats when they start."""
from __future__ import annotations

import logging
from typing import TextIO

from .defaults import DefaultsFileError, beats_sync

logger = logging.getLogger(__name__)


def beats_sync_on_startup(stdout: TextIO, stderr: TextIO) -> bool:
    """Sync the defaults file, reporting the outcome. A bad file is reported and changes
    nothing, but does not stop the process: the beats already in the table keep running."""
    try:
        plan = beats_sync()
    except DefaultsFileError as exc:
        stderr.write(f"heartbeats: {exc.path} was not synced, nothing changed:\n")
        stderr.writelines(f"  {problem.render(str(exc.path))}\n" for problem in exc.problems)
        return False
    if plan.changes:
        stdout.write(
            f"heartbeats: synced {plan.path.name}: {len(plan.create)} created, {len(plan.update)} updated, "
            f"{len(plan.delete)} deleted\n"
        )
    return True
