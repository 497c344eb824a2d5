"""What is wrong with a text that is not JSON, in json's own words, for a person to read."""
from __future__ import annotations

import json


def json_problem(exc: json.JSONDecodeError) -> str:
    """json's message without the dangling "at" some of its messages end in ("Invalid
    control character at"): the caller says the line and column beside it."""
    return exc.msg.removesuffix(" at")
