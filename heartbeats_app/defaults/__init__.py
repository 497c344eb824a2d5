"""The heartbeats defaults file: config-owned beats synced into the table (see sync.py
for the format and the rules)."""
from __future__ import annotations

from .reading import BeatSpec, DefaultsFileError, Problem
from .sync import SyncPlan, beats_plan, beats_sync, defaults_path

__all__ = ["BeatSpec", "DefaultsFileError", "Problem", "SyncPlan", "beats_plan", "beats_sync", "defaults_path"]
