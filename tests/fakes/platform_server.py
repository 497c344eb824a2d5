"""A fake platform API (Telegram, WhatsApp Graph, Slack Web API, Discord REST, Twilio)
over real HTTP. It records every request and answers from per-path scripts, so tests see
exactly what Qorven sent and can inject 429s, 5xx, hangs and reset connections. Telegram's
sendMessage is read as Telegram reads it (tests/fakes/telegram_html.py): text it cannot
parse, an empty one or one over 4096 characters is refused with Telegram's 400, whatever
the scripts say."""
from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from .telegram_html import refusal


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)  # when it arrived
    peer: tuple = ()  # the client's (address, port): one connection reused keeps its port

    @property
    def json(self) -> Any:
        return json.loads(self.body or b"null")

    @property
    def form(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self.body.decode()).items()}


@dataclass
class Canned:
    status: int = 200
    body: Any = field(default_factory=lambda: {"ok": True})
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    delay: float = 0.0  # seconds before answering: a platform that hangs
    reset: bool = False  # read the request, then reset the connection: no answer at all
    # Run on the server's thread once the request is in, before the answer: what happens
    # while a request is out (the host fixing a bot's token in the admin). It is given the
    # request; a database connection it opens is closed after it.
    meanwhile: Callable[[Recorded], None] | None = None


class PlatformServer:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.scripts: list[tuple[re.Pattern[str], list[Canned]]] = []
        self.defaults: list[tuple[re.Pattern[str], Canned]] = []
        # Called with each request as it arrives, before it is answered: a fault elsewhere
        # made while the platform holds the request (a database connection cut, say).
        self.on_request: Callable[[Recorded], None] | None = None
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def script(self, pattern: str, *responses: Canned) -> None:
        """The next requests whose path matches `pattern` get these responses, in order."""
        with self._lock:
            self.scripts.append((re.compile(pattern), list(responses)))

    def default(self, pattern: str, response: Canned) -> None:
        with self._lock:
            self.defaults.append((re.compile(pattern), response))

    def sent(self, pattern: str) -> list[Recorded]:
        rx = re.compile(pattern)
        return [r for r in self.requests if rx.search(r.path)]

    def _answer(self, recorded: Recorded) -> Canned:
        if self.on_request is not None:
            self.on_request(recorded)
        with self._lock:
            self.requests.append(recorded)
            refused = _telegram_refusal(recorded)
            if refused is not None:
                return refused
            for rx, queue in self.scripts:
                if queue and rx.search(recorded.path):
                    return queue.pop(0)
            for rx, canned in reversed(self.defaults):
                if rx.search(recorded.path):
                    return canned
        return Canned()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            # As real servers do: a response's writes leave at once (not after the client's
            # delayed ACK of the headers, ~40 ms on a connection kept open).
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _do(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                recorded = Recorded(self.command, self.path, dict(self.headers), body, peer=tuple(self.client_address))
                canned = server._answer(recorded)
                if canned.meanwhile is not None:
                    from django.db import connection

                    try:
                        canned.meanwhile(recorded)
                    finally:
                        connection.close()
                if canned.delay:
                    time.sleep(canned.delay)
                if canned.reset:
                    # SO_LINGER 0: closing sends RST, as a proxy or a platform dropping the call does.
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    return
                data = canned.raw if canned.raw is not None else json.dumps(canned.body).encode()
                self.send_response(canned.status)
                self.send_header("Content-Type", "application/json" if canned.raw is None else "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                for k, v in canned.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _do

        return Handler


_TELEGRAM_SEND = re.compile(r"/telegram/bot[^/]+/sendMessage$")


def _telegram_refusal(recorded: Recorded) -> Canned | None:
    """Telegram's 400 for a sendMessage it would not take (its text), else None."""
    if recorded.method != "POST" or not _TELEGRAM_SEND.search(recorded.path):
        return None
    try:
        body = recorded.json
    except ValueError:
        return None
    described = refusal(body) if isinstance(body, dict) else None
    if described is None:
        return None
    return Canned(400, {"ok": False, "error_code": 400, "description": described})
