"""Errors of the heartbeats app. Messages are written to be shown as they are: to a person
in the admin or the CLI, and to the model through the beat tools."""
from __future__ import annotations


class HeartbeatNotFound(Exception):
    """A beat that does not exist or is not visible to the caller (one error for both)."""


class HeartbeatInvalid(ValueError):
    """A beat that cannot be saved as given. `field` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class HeartbeatReadOnly(Exception):
    """A config-owned (managed) beat: only the defaults file changes it."""
