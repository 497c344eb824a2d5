"""One line of `qorven doctor`: a ✓ or ✗, what was seen and, on ✗, the fix."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    area: str  # database, redis, workers, beat, model, channel, heartbeats, skills, backup, deploy
    subject: str  # what was checked: a Qor, a binding, a file
    ok: bool
    detail: str  # what was seen
    fix: str = ""  # what to do, when not ok

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def guarded(area: str, subject: str, fix: str, probe: Callable[[], Check]) -> Check:
    try:
        return probe()
    except Exception as exc:  # a check that fails to run is a ✗ of its own, never a crash
        return Check(area, subject, False, f"{type(exc).__name__}: {str(exc)[:200]}", fix)
