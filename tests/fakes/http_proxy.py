"""A forward HTTP proxy over real sockets, for tests, as a host's outbound proxy would be:
`CONNECT host:port` opens a tunnel (https), a request in absolute form
(`POST http://host:port/path`) is sent on in origin form (http). Each request is recorded
(`requests`: method, target, the Proxy-Authorization it carried) before it is forwarded.

The proxy resolves names itself, as a real one does on its own network: `hosts` maps
names only it knows (a name the client cannot resolve) to addresses; other names resolve
as usual. With `credentials`, a request without them gets 407. One request per client
connection (`Connection: close` both ways); a tunnel lasts until either side closes it.
"""
from __future__ import annotations

import base64
import selectors
import socket
import socketserver
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer", "upgrade"}


@dataclass(frozen=True)
class Proxied:
    method: str
    target: str  # host:port for CONNECT, the absolute URL otherwise
    authorization: str  # the Proxy-Authorization header ("" without one)


class HttpProxy:
    def __init__(self, *, hosts: dict[str, str] | None = None, credentials: tuple[str, str] | None = None) -> None:
        self.hosts = {name.lower(): address for name, address in (hosts or {}).items()}
        self.credentials = credentials
        self.requests: list[Proxied] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._serve(self.request)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def url_with_credentials(self) -> str:
        assert self.credentials is not None
        user, password = self.credentials
        return f"http://{user}:{password}@127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> HttpProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def targets(self) -> list[str]:
        with self._lock:
            return [f"{r.method} {r.target}" for r in self.requests]

    # --- one client connection ---

    def _serve(self, client: socket.socket) -> None:
        client.settimeout(30)
        head, rest = _read_head(client)
        if head is None:
            return
        request_line, *header_lines = head.split("\r\n")
        method, target, _version = request_line.split(" ", 2)
        headers = [tuple(part.strip() for part in line.split(":", 1)) for line in header_lines if ":" in line]
        authorization = next((v for k, v in headers if k.lower() == "proxy-authorization"), "")
        with self._lock:
            self.requests.append(Proxied(method, target, authorization))
        if self.credentials is not None and authorization != _basic(*self.credentials):
            client.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n"
                           b"Content-Length: 0\r\nConnection: close\r\n\r\n")
            return
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            upstream = self._connect(host.strip("[]"), int(port))
            if upstream is None:
                client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            _pipe(client, upstream, rest)
            return
        parts = urlsplit(target)
        upstream = self._connect(parts.hostname or "", parts.port or 80)
        if upstream is None:
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        length = int(next((v for k, v in headers if k.lower() == "content-length"), "0") or 0)
        while len(rest) < length:
            more = client.recv(65536)
            if not more:
                break
            rest += more
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        kept = "".join(f"{k}: {v}\r\n" for k, v in headers if k.lower() not in _HOP_BY_HOP)
        upstream.sendall(f"{method} {path} HTTP/1.1\r\n{kept}Connection: close\r\n\r\n".encode("latin-1") + rest)
        answer, body = _read_head(upstream)
        if answer is None:
            upstream.close()
            return
        status, *answer_headers = answer.split("\r\n")
        kept = "".join(f"{line}\r\n" for line in answer_headers if line.split(":", 1)[0].strip().lower() != "connection")
        client.sendall(f"{status}\r\n{kept}Connection: close\r\n\r\n".encode("latin-1") + body)
        _pipe(client, upstream, b"", one_way=True)

    def _connect(self, host: str, port: int) -> socket.socket | None:
        address = self.hosts.get(host.lower(), host)
        try:
            upstream = socket.create_connection((address, port), timeout=10)
        except OSError:
            return None
        upstream.settimeout(30)
        return upstream


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _read_head(sock: socket.socket) -> tuple[str | None, bytes]:
    """The head of a request or an answer (up to the blank line), and what came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            more = sock.recv(65536)
        except OSError:
            return None, b""
        if not more:
            return None, b""
        data += more
    head, _, rest = data.partition(b"\r\n\r\n")
    return head.decode("latin-1"), rest


def _pipe(client: socket.socket, upstream: socket.socket, pending: bytes, *, one_way: bool = False) -> None:
    """Bytes both ways (or only upstream → client) until a side closes; then both close."""
    if pending:
        upstream.sendall(pending)
    selector = selectors.DefaultSelector()
    selector.register(upstream, selectors.EVENT_READ, client)
    selector.register(client, selectors.EVENT_READ, upstream)
    try:
        while True:
            events = selector.select(timeout=30)
            if not events:
                return
            for key, _ in events:
                source, sink = key.fileobj, key.data
                try:
                    data = source.recv(65536)  # type: ignore[union-attr]
                except OSError:
                    return
                if not data:
                    return
                if one_way and source is client:
                    continue  # a request body past its length: not ours to send
                sink.sendall(data)
    finally:
        selector.close()
        for sock in (client, upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
