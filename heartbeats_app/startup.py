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


def backup_beat_sync_on_startup(stdout: TextIO) -> None:
    """Sync QORVEN_BACKUP_SCHEDULE into the beat's table, saying what the schedule is. Run
    by the process that runs the beat (`qorven beat`, or `qorven serve` firing heartbeats
    itself), so the schedule is the one set where the beat runs."""
    from django.conf import settings

    from .services import backup_beat_sync

    done = backup_beat_sync()
    if settings.QORVEN_BACKUP_SCHEDULE:
        keep = f"the newest {settings.QORVEN_BACKUP_KEEP} kept" if settings.QORVEN_BACKUP_KEEP else "all kept"
        stdout.write(f"backups: '{settings.QORVEN_BACKUP_SCHEDULE}' ({settings.TIME_ZONE}) into "
                     f"{settings.QORVEN_BACKUP_DIR}, {keep}\n")
    elif done == "removed":
        stdout.write("backups: no longer scheduled (QORVEN_BACKUP_SCHEDULE is empty)\n")
