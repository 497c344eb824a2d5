"""`qorven doctor`: is this install able to work, and if not, what to do about it.

Each check answers ✓ or ✗ with what it saw and, on ✗, the fix. The model and platform
checks make one real request each (a one-word completion; Telegram's getMe and
getWebhookInfo, Slack's auth.test, the WhatsApp phone number, Discord's bot user, Twilio's incoming number): they
prove the credentials, not just that they are set. Nothing is changed anywhere.

The checks are grouped by what they look at: the install (checks_install: database, Redis,
workers, beat), what answers (checks_models, checks_platforms) and the files and settings
(checks_files); doctor_checks runs them in order.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

from .check import Check
from .checks_files import backup_checks, deploy_checks, heartbeats_checks, skills_checks
from .checks_install import NOT_MIGRATED, beat_checks, database_checks, redis_checks, worker_checks
from .checks_models import model_checks
from .checks_platforms import API_BASES, channel_checks

__all__ = ["API_BASES", "Check", "doctor_checks"]


def doctor_checks(*, areas: frozenset[str] | None = None) -> list[Check]:
    """Every check (or those of `areas`), in the order a newcomer would fix them."""
    found: list[Check] = []
    database_down: Check | None = None  # the database's ✗, once seen
    for area, probe in _PROBES:
        if areas is not None and area not in areas:
            continue
        if database_down and area in _NEEDS_DATABASE:
            if database_down.detail.endswith(NOT_MIGRATED):  # it answers: only its tables are missing
                found.append(Check(area, "-", False, "not checked: the database is not migrated",
                                   "run `qorven migrate` first"))
            else:
                found.append(Check(area, "-", False, "not checked: the database is unreachable",
                                   "fix the database first"))
            continue
        try:
            found.extend(probe())
        except Exception as exc:  # a check that fails to run is a ✗ of its own, never a crash
            found.append(Check(area, "-", False, f"could not be checked ({type(exc).__name__})",
                               "fix what the checks above report, then run `qorven doctor` again"))
        database_down = database_down or next((c for c in found if c.area == "database" and not c.ok), None)
    return found


# What reads the database: not tried once it is unreachable (each would wait out the
# connection's timeout to say the same).
_NEEDS_DATABASE = frozenset({"model", "channel", "heartbeats", "skills", "backup"})
_PROBES: list[tuple[str, Callable[[], Iterator[Check]]]] = [
    ("database", database_checks), ("redis", redis_checks), ("workers", worker_checks), ("beat", beat_checks),
    ("model", model_checks), ("channel", channel_checks), ("heartbeats", heartbeats_checks),
    ("skills", skills_checks), ("backup", backup_checks), ("deploy", deploy_checks),
]
