"""A client sending its request's body slowly, or never finishing it (a slow-loris), holds a
socket and nothing more: under either server the body is read on the event loop, never on
one of the threads that run views (Django's, the API's four, the webhooks' writer), so
other requests are answered meanwhile. `qorven serve` on an SQLite file of its own, over real
HTTP. Neither server bounds how long a body may take: the proxy in front does (README)."""
from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest

from .test_client_address import Server

# More than run at once on every path: the API's 4 threads, Django's executor (at most 32).
SLOW = 36


def _slow_request(port: int, method: str, path: str) -> socket.socket:
    """A request whose headers promise 1,000 bytes of body and send 10 of them."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 f"Content-Length: 1000\r\n\r\n{{\"text\": \"".encode() + b"x")
    return sock


@pytest.mark.parametrize("server_name", ["uvicorn", "daphne"])
def test_requests_whose_bodies_never_end_hold_no_thread_other_requests_need(tmp_path, migrated_sqlite, server_name):
    server = Server(tmp_path, migrated_sqlite, QORVEN_ASGI_SERVER=server_name)
    paths = [("POST", "/accounts/login/"), ("POST", "/v1/qors/aria/messages"),
             ("POST", "/v1/webhooks/telegram")]
    slow = [_slow_request(server.port, *paths[n % len(paths)]) for n in range(SLOW)]
    try:
        assert server.sign_in("nobody") == 200  # the form again: a page and a POST through Django
        with pytest.raises(urllib.error.HTTPError) as api:  # the API's threads: no token
            urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{server.port}/v1/qors/aria/messages", data=b"{}",
                headers={"Content-Type": "application/json"}), timeout=10)
        assert api.value.code == 401
        hook = urllib.request.Request(f"http://127.0.0.1:{server.port}/v1/webhooks/telegram",
                                      data=json.dumps({"update_id": 1}).encode(),
                                      headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as webhook:  # no binding's secret: refused, answered
            urllib.request.urlopen(hook, timeout=10)
        assert 400 <= webhook.value.code < 500
    finally:
        for sock in slow:
            sock.close()
        server.stop()
