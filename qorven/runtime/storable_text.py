"""Text as every store takes it: without U+0000.

PostgreSQL refuses NUL in text and in jsonb ("\\u0000 cannot be converted to text"), so a
message holding one could not be stored there at all, while SQLite kept it. No surface
shows a NUL, so it is dropped wherever text comes in (platform payloads, the page, the
terminal, the model's answers), the same on every database; other control characters are
the person's text and are kept.
"""
from __future__ import annotations

from typing import Any

NUL = "\x00"


def storable(text: str) -> str:
    """`text` without NUL."""
    return text.replace(NUL, "") if NUL in text else text


def storable_json(value: Any) -> Any:
    """A JSON value (metadata, tool calls, a stored payload) with NUL dropped from every
    string in it, keys included."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable(k) if isinstance(k, str) else k: storable_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable_json(v) for v in value]
    return value
