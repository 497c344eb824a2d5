"""What the terminal makes of the server's answer to a message it sent
(channels_app.terminal_client): whether to send it again and when, and what the person
reads of a refusal — always a notice of ours or our API's own words, never those of
something in front of the server."""
from __future__ import annotations

import math
from typing import Any

import httpx

from .adapters.base import retry_after_seconds


def json_object(response: httpx.Response) -> dict[str, Any]:
    """The server's JSON object, or {} (a proxy's page, a body that is no object)."""
    if not response.headers.get("content-type", "").startswith("application/json"):
        return {}
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


# What the person reads of a 5xx is a notice of ours, never the body's words: a proxy's
# JSON or HTML page (or anything in front of the server) says what it likes, at any length.
# A 503 of ours names why in its "code" (README, "Errors are JSON").
SERVER_UNAVAILABLE = "the server is unavailable just now"


def unavailable_notice(response: httpx.Response) -> str:
    """Our notice for a 5xx `response`: the one for its "code" when it is one of ours, else
    SERVER_UNAVAILABLE (with the status, when not a 503)."""
    from qorven.agent.stop import STOP_UNAVAILABLE, STOP_UNAVAILABLE_CODE
    from qorven.runtime.database import DATABASE_DOWN_CODE, DATABASE_DOWN_NOTICE

    code = json_object(response).get("code") if response.status_code == 503 else None
    known = {DATABASE_DOWN_CODE: DATABASE_DOWN_NOTICE, STOP_UNAVAILABLE_CODE: STOP_UNAVAILABLE}
    if isinstance(code, str) and code in known:
        return known[code]
    return SERVER_UNAVAILABLE + ("" if response.status_code == 503 else f" (HTTP {response.status_code})")


def refusal_notice(response: httpx.Response) -> str:
    """What the person reads of a 4xx refusing a message (not 401, 403, 404: access lost):
    the body's "error" when it is one of our message API's refusals (api.message_refusals),
    else our notice with the status. Something in front of the server (a firewall, a
    gateway, a proxy's rate limit) answers with words of its own, which never reach the
    person; our message API never answers 429."""
    from .api import message_refusals

    said = json_object(response).get("error")
    if isinstance(said, str) and said in message_refusals():
        return said
    if response.status_code == 429:
        wait = retry_after_seconds(response.headers.get("Retry-After"))
        return "the server is busy just now (HTTP 429)" + (f": try again in {math.ceil(wait)} s" if wait else "")
    return f"the server refused the message (HTTP {response.status_code})"


# A message's POST told to come back later (503, 429) is sent again by itself: the page's
# chat.js waits the same way.
SEND_TRIES = 4  # the first and three more
SEND_WAIT_DEFAULT = 2.0  # seconds, for a 503 that does not say (a proxy's)
SEND_WAIT_MAX = 60.0  # seconds: told to wait longer, the line goes back to the prompt at once


def send_wait(response: httpx.Response) -> float | None:
    """Seconds to wait before sending `response`'s message again, or None: not again."""
    if response.status_code not in (429, 503):
        return None
    wait = retry_after_seconds(response.headers.get("Retry-After"))
    if wait is None and response.status_code == 503:
        wait = SEND_WAIT_DEFAULT
    if wait is None or wait > SEND_WAIT_MAX:
        return None
    return max(wait, 1.0)
