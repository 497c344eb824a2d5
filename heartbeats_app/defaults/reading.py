"""Reading the heartbeats defaults file: its schema (pydantic), and JSON parsing that
remembers where every value is, so a problem is reported with its line and field."""
from __future__ import annotations

import json
import json.decoder
import json.scanner
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sessions_app.channel_kinds import CHAT_FAMILY

from ..cron import CronError, cron_parse, timezone_choose

# ---- the file's schema -------------------------------------------------------------------

class DeliverSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    user: str = Field(min_length=1)
    channel: str

    @field_validator("channel")
    @classmethod
    def _chat_channel(cls, value: str) -> str:
        if value not in CHAT_FAMILY:
            raise ValueError(f"{value!r} is not a chat channel; use one of: {', '.join(sorted(CHAT_FAMILY))}")
        return value


class BeatSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    tenant: str = Field(min_length=1)
    qor: str | None = None
    name: str = Field(min_length=1, max_length=100)
    cron: str
    timezone: str = ""
    prompt: str = ""
    deliver: DeliverSpec | None = None
    enabled: bool = True

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        try:
            return cron_parse(value).expression
        except CronError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        if value:
            try:
                timezone_choose(value)
            except CronError as exc:
                raise ValueError(str(exc)) from None
        return value


class DefaultsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    comment: str = ""
    beats: list[BeatSpec]  # required: a file that names no beats is a mistake, not "none"


# ---- reading with line numbers --------------------------------------------------------------

class _Dict(dict):
    start: int = 0
    positions: dict[Any, int]


class _List(list):
    start: int = 0
    positions: dict[Any, int]


class _DuplicateKey(ValueError):
    def __init__(self, key: str, pos: int) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key, self.pos = key, pos


def _recording(scan_once: Any, starts: list[int]) -> Any:
    def scan(s: str, idx: int) -> Any:
        starts.append(json.decoder.WHITESPACE.match(s, idx).end())  # type: ignore[attr-defined]
        return scan_once(s, idx)

    return scan


def _parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None):
    _, end = s_and_end
    starts: list[int] = []
    pairs, new_end = json.decoder.JSONObject(
        s_and_end, strict, _recording(scan_once, starts), None, lambda p: p, memo
    )
    obj = _Dict()
    obj.start, obj.positions = end - 1, {}
    for (key, value), pos in zip(pairs, starts):
        if key in obj:
            raise _DuplicateKey(key, pos)
        obj[key] = value
        obj.positions[key] = pos
    return obj, new_end


def _parse_array(s_and_end, scan_once):
    _, end = s_and_end
    starts: list[int] = []
    values, new_end = json.decoder.JSONArray(s_and_end, _recording(scan_once, starts))
    out = _List(values)
    out.start, out.positions = end - 1, dict(enumerate(starts))
    return out, new_end


def _load_located(text: str) -> Any:
    decoder = json.JSONDecoder()
    decoder.parse_object = _parse_object  # type: ignore[attr-defined]
    decoder.parse_array = _parse_array  # type: ignore[attr-defined]
    # The pure-Python scanner calls the hooks above (the C one does not).
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    return decoder.decode(text)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _position(data: Any, loc: tuple[Any, ...]) -> int:
    """Where in the text the thing at `loc` is: the value of the deepest key that exists
    (so a missing field points at its object)."""
    node, pos = data, getattr(data, "start", 0)
    for key in loc:
        positions = getattr(node, "positions", None)
        if positions is None or key not in positions:
            break
        pos = positions[key]
        node = node[key]
    return pos


def _loc_text(loc: tuple[Any, ...]) -> str:
    out = ""
    for key in loc:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out or "(file)"


@dataclass(frozen=True)
class Problem:
    line: int
    field: str
    message: str
    column: int | None = None

    def render(self, path: str) -> str:
        where = (f"{path}:{self.line}" if self.line else path) + (f":{self.column}" if self.column else "")
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class DefaultsFileError(Exception):
    """The defaults file cannot be synced. `problems` says where and why; nothing changed."""

    def __init__(self, path: Path, problems: list[Problem]) -> None:
        self.path = path
        self.problems = problems
        super().__init__("\n".join(p.render(str(path)) for p in problems))
