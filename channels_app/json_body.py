"""The one way a JSON request body is read: webhooks, the API, the chat page, the webchat.

Checked before anything else happens with it: at most QORVEN_MAX_BODY bytes (413), strict
UTF-8, valid JSON, nested at most MAX_DEPTH deep, at most MAX_CONTAINERS objects and arrays
(counted in the text before it is parsed), and no lone surrogate in any string
(`"\\ud800"` parses in Python but no database or platform takes it) — each a 400. The
parsed body is kept on the request, so an adapter that looks at it twice parses it once.
"""
from __future__ import annotations

import json
import re
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest

from qorven.runtime.json_errors import json_problem

MAX_DEPTH = 64
# Objects and arrays in one body, at most: no platform's webhook nor any call of ours sends
# nearly so many, and a megabyte of empty arrays (330,000) took Python's parser and our
# check 1.3 s, on the event loop that screens webhooks before any signature is checked.
MAX_CONTAINERS = 10_000
# A JSON string (its escapes included), to leave out of the count of brackets.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
QUERY_INT_MAX = 2**53 - 1  # the largest integer a query parameter may hold (seqs, ids)
_CACHE = "_qorven_json_body"


_INTEGER = re.compile(r"[+-]?0*(?P<digits>[0-9]*[0-9])")  # digits without the zeros before them


class ParamRefused(ValueError):
    """A query parameter that is not what it must be (a 400 saying which and why)."""


def query_int(request: HttpRequest, name: str, *, minimum: int, maximum: int | None = None) -> int | None:
    """Query parameter `name` as an integer from `minimum` to `maximum` (QUERY_INT_MAX when
    not given), None when absent or empty; else ParamRefused naming it. ASCII digits only:
    Python's int() would also take "1_000", " 7 " and other scripts' digits."""
    raw = request.GET.get(name)
    if raw in (None, ""):
        return None
    maximum = QUERY_INT_MAX if maximum is None else maximum
    written = _INTEGER.fullmatch(raw)
    if written is None:
        raise ParamRefused(f"{name} must be an integer")
    # Converted only when short: a long string of digits is out of range without reading it.
    value = int(raw) if len(written.group("digits")) <= 20 else None
    if value is None or not minimum <= value <= maximum:
        raise ParamRefused(f"{name} must be between {minimum} and {maximum}")
    return value


class BodyRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def body_too_large(limit: int) -> str:
    """The 413's "error" for a body past `limit` bytes."""
    return f"the body is larger than {limit} bytes"


def json_body(request: HttpRequest) -> Any:
    """The request's body as JSON, or BodyRefused (413 or 400) saying what is wrong."""
    if hasattr(request, _CACHE):
        return getattr(request, _CACHE)
    limit = settings.QORVEN_MAX_BODY
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        raise BodyRefused(413, body_too_large(limit))
    try:
        raw = request.body
    except RequestDataTooBig:
        raise BodyRefused(413, body_too_large(limit)) from None
    if len(raw) > limit:
        raise BodyRefused(413, body_too_large(limit))
    body = json_parse(raw)
    setattr(request, _CACHE, body)
    return body


def json_parse(raw: bytes | str) -> Any:
    """Parse and check one JSON document (also for WebSocket frames)."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise BodyRefused(400, "the body is not UTF-8") from None
    if _containers(text) > MAX_CONTAINERS:
        raise BodyRefused(400, f"the body holds more than {MAX_CONTAINERS:,} objects and arrays")
    try:
        body = json.loads(text) if text.strip() else None
    except RecursionError:
        raise BodyRefused(400, f"the body is nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        # Where it went wrong, for whoever writes the client, in json's words ("Expecting value").
        raise BodyRefused(400, f"the body is not valid JSON: {json_problem(exc)} at line {exc.lineno}, "
                               f"column {exc.colno}") from None
    except ValueError:  # a number too long to read (Python's digit limit)
        raise BodyRefused(400, "the body is not valid JSON") from None
    if _needs_walk(text):
        _check(body, text)
    return body


# What in a document's text can hold a lone surrogate once parsed: the character itself
# (only in text given as str: strict UTF-8 decoding refuses it) or a \uD800–\uDFFF escape.
_SURROGATE_IN_TEXT = re.compile(r"[\ud800-\udfff]|\\u[dD][89a-fA-F]")


def _containers(text: str) -> int:
    """How many objects and arrays the text opens, at least as many as it holds; strings
    (a paste of code) are left out only when the quick count is over the limit."""
    count = text.count("{") + text.count("[")
    if count <= MAX_CONTAINERS:
        return count
    outside = _STRING.sub("", text)
    return outside.count("{") + outside.count("[")


def _needs_walk(text: str) -> bool:
    """Whether the parsed document must be checked: it can only nest as deep as it has
    opening brackets, and only hold a lone surrogate where its text names one. Most
    bodies have neither, and a scan of the text costs a fraction of a check."""
    return text.count("{") + text.count("[") > MAX_DEPTH or _SURROGATE_IN_TEXT.search(text) is not None


_BRACKET = re.compile(r"[\[\]{}]")


def _check(body: Any, text: str) -> None:
    """Depth and strings, from the text (valid JSON: its brackets outside strings are
    balanced, at most 2 × MAX_CONTAINERS of them) and by encoding the strings, both at
    C speed: a walk of every value in Python took 0.5 s for 450,000 numbers."""
    if text.count("{") + text.count("[") > MAX_DEPTH:
        depth = deepest = 0
        for bracket in _BRACKET.findall(_STRING.sub("", text)):
            depth += 1 if bracket in "[{" else -1
            deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            raise BodyRefused(400, f"the body is nested deeper than {MAX_DEPTH} levels")
    if _SURROGATE_IN_TEXT.search(text) is not None:
        try:  # a lone surrogate, in a key or a value, is what UTF-8 cannot encode
            json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise BodyRefused(400, "the body holds a lone surrogate (not a character)") from None
