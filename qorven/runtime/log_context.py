"""Which tenant, Qor, session and message a log line is about, and the two log formats.

Tasks and turns wrap their work in `log_context(tenant=…, session=…)`; `ContextFilter`
(on the console handler, see qorven.settings.LOGGING) copies those ids onto every record
logged meanwhile, from any module. `QORVEN_LOG_FORMAT=json` writes one JSON object a line
(`JsonFormatter`). `SecretFilter` masks what looks like a key or a bot token, an email
address or a phone number in any message, traceback or stack, so a secret or a person's
address quoted in an error never reaches the log whole; and, inside `log_person(…)`, the
platform ids of the person the work is about, which look like nothing in particular (a
WhatsApp sender's number has no +). `ClientErrorFilter` makes Django's record of a request
refused for the client's own doing (4xx) a one-line warning.
"""
from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from .repeated_failure import REPEAT_EVERY

KEYS = ("tenant", "qor", "session", "seq", "message_id", "event")  # seq: a message's, in its session
_ids: ContextVar[dict[str, Any]] = ContextVar("qorven_log_ids", default={})  # noqa: B039  never mutated
_people: ContextVar[tuple[str, ...]] = ContextVar("qorven_log_people", default=())
PERSON_ID_MIN = 6  # characters: a shorter id would take seqs and counts equal to it along


@contextmanager
def log_context(**ids: Any) -> Iterator[None]:
    """Tag every log record made inside with these ids (None values are left out)."""
    token = _ids.set({**_ids.get(), **{k: v for k, v in ids.items() if v is not None}})
    try:
        yield
    finally:
        _ids.reset(token)


@contextmanager
def log_person(*ids: str) -> Iterator[None]:
    """Mask these platform ids of a person (a sender, the chat a reply goes to) wherever a
    log record made inside quotes them: a WhatsApp number comes without the + that tells
    `mask` a phone number from a message id, a seq or a time, and a platform's refusal
    quotes it. The first two characters stay (a country code), as for a number with +."""
    token = _people.set((*_people.get(), *(i for i in ids if len(i) >= PERSON_ID_MIN)))
    try:
        yield
    finally:
        _people.reset(token)


class ContextFilter(logging.Filter):
    """Puts the current ids on the record: `record.ids` (a dict) and `record.context`
    ("tenant=3 session=41 " for the text format; empty outside any context)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ids = _ids.get()
        record.ids = ids
        record.context = "".join(f"{k}={ids[k]} " for k in KEYS if k in ids)
        return True


# Keys and tokens as they appear in errors and request lines: OpenAI-style keys, Bearer
# values, Qorven's API tokens, Telegram bot tokens in URLs (`bot<id>:…`) and written out
# bare (`<id>:<35 URL-safe characters>`: the 30-character minimum leaves times, `41:7`
# and ids alone), Slack tokens, and the value of a `token=` (or `visitor=`, `key=`, …)
# query parameter — an access log's line for a socket a page opened with its token in the
# URL. The first few characters stay (a bot token's id), to tell keys apart.
_SECRET = re.compile(
    r"(?P<keep>sk-[A-Za-z0-9]{0,4}|Bearer\s+\S{0,4}|qv_[A-Za-z0-9_\-]{0,4}|bot\d{3,}:|xox[abprs]-"
    r"|(?<![\w:.\-])\d{5,12}:(?=[A-Za-z0-9_\-]{30,})"
    r"|[?&](?:token|visitor|access_token|api_key|key|secret|signature|sig)=[^&\s\"']{0,4})[A-Za-z0-9_\-\.:%~+/=]{6,}"
)


# A person's address or phone number in a platform's error (an SMTP server's "<priya@…>:
# Recipient address rejected", Twilio's "The 'To' number +49…"): the domain stays, and a
# number's country code, to tell a misconfiguration from a person. A number needs its
# "+" and 8 to 15 digits, so times, counts and ids stay as they are.
_PERSONAL = re.compile(r"(?<![\w.+\-])[\w.+\-]+(?P<domain>@[\w\-]+(?:\.[\w\-]+)+)"
                       r"|(?<![\w+])(?P<country>\+\d{2})\d{6,13}(?!\d)")


def mask(text: str) -> str:
    text = _SECRET.sub(lambda m: m.group("keep") + "…", text)
    text = _PERSONAL.sub(lambda m: "…" + m["domain"] if m["domain"] else m["country"] + "…", text)
    for person in _people.get():  # whole: not a part of a longer id or number
        text = re.sub(rf"(?<![\w+]){re.escape(person)}(?!\w)", person[:2] + "…", text)
    return text


_formatter = logging.Formatter()


class SecretFilter(logging.Filter):
    """Masks keys and tokens in the message (and its arguments), the exception's traceback
    and the stack before any handler sees them. The traceback is rendered here, masked,
    into `record.exc_text`, which every `logging.Formatter` prints instead of rendering it
    again — so the text format, the JSON format and any other handler print the same
    masked text (a provider's error quotes its URL, a Telegram URL carries the bot token)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = _formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask(record.exc_text)
        if record.stack_info:
            record.stack_info = mask(record.stack_info)
        return True


class ClientErrorFilter(logging.Filter):
    """Makes Django's record of a request refused 4xx one WARNING line, without the
    traceback: too many form fields (django.security.TooManyFieldsSent, logged as an ERROR),
    a body too large, an admin page that is not the user's (django.request's "Forbidden").
    Anyone can send those, as often as they like; with Django's traceback each looked like
    a fault of ours and buried the ones that are. A 5xx keeps its level and traceback.

    The line begins as the access log's line for the request does — the client's address
    (the one a trusted proxy forwards: qorven.runtime.client_address), the method and the
    path, the status — so the two are found together: `198.51.100.7 - "POST /accounts/login/"
    400 The number of GET/POST parameters exceeded …`. Never the query (it may carry a
    token) nor the body; the path is escaped as Django escapes it, so it stays one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if not (record.name.startswith("django.") and isinstance(status, int) and 400 <= status < 500):
            return True
        record.exc_info, record.exc_text = None, None
        request = getattr(record, "request", None)
        meta = getattr(request, "META", None)
        if isinstance(meta, dict) and not getattr(record, "request_named", False):  # once, on any handler
            record.msg, record.args = f"{_request_line(request, meta, status)} {record.getMessage()}", None
            record.request_named = True
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
            # Made an ERROR, it passed a level the warning it is now might not have.
            return logging.getLogger(record.name).isEnabledFor(logging.WARNING)
        return True


def one_line(text: str) -> str:
    """`text` as one line of plain ASCII, as Django writes a path into its log: a line
    break, a terminal escape or any character beyond ASCII written as its escape. For
    what a client chose (a path, an address in a payload) quoted in a log line, which
    could otherwise forge lines of its own or drive the terminal reading the log."""
    return text.encode("unicode_escape").decode("ascii")


def _request_line(request: Any, meta: dict[str, Any], status: int) -> str:
    client = meta.get("REMOTE_ADDR") or "-"
    return f'{one_line(str(client))} - "{one_line(str(request.method))} {one_line(str(request.path))}" {status}'


class UpkeepFilter(logging.Filter):
    """Drops Celery beat's INFO line for each of Qorven's own upkeep tasks (`__qorven_…`:
    the sweep every 15 seconds, the hourly prunes), unless the log level is DEBUG: four
    lines a minute that buried the heartbeats sent, which are still logged, as are any
    warnings and errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO or logging.getLogger().isEnabledFor(logging.DEBUG):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        return not (str(record.msg).startswith("Scheduler: Sending due task")
                    and args and str(args[0]).startswith("__qorven_"))


class RepeatsFilter(logging.Filter):
    """For a library that logs a failure it retries on its own, every time (channels_redis'
    pub/sub receive loop with Redis away: a warning with a traceback a second, in every
    server process): the first of a run with its traceback, then at most a line a minute
    saying how many there were, as Qorven's own RepeatedFailure does. A run ends once
    none came for a minute. Records below WARNING and other messages pass as they are."""

    def __init__(self, name: str = "") -> None:
        super().__init__(name)
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], list[float]] = {}  # (logger, message): [last seen, last shown]
        self.counted = 0  # records held back, all runs

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key, now = (record.name, str(record.msg)), time.monotonic()
        with self._lock:
            run = self._runs.get(key)
            if run is None or now - run[0] > REPEAT_EVERY:  # a new run: shown as it is
                self._runs[key] = [now, now, 0]
                return True
            run[0] = now
            if now - run[1] < REPEAT_EVERY:
                run[2] += 1
                self.counted += 1
                return False
            more, run[1], run[2] = run[2], now, 0
        record.msg, record.args = f"{record.getMessage()} ({more + 1} times in the last minute)", ()
        record.exc_info, record.exc_text = None, None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the context's ids, and the
    exception's traceback and the stack when there are (masked, by `SecretFilter` on the
    handler and again here, for a handler without it)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **getattr(record, "ids", {}),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = mask(record.exc_text)
        if record.stack_info:
            line["stack"] = mask(self.formatStack(record.stack_info))
        return json.dumps(line, default=str, ensure_ascii=False)
