"""The client's address behind a reverse proxy.

Behind a proxy every connection comes from the proxy: the sign-in and webchat limits
would count the whole world as one client (one person's wrong guesses locking everyone
out), the access log would name the proxy for every request, and a proxy on the same
machine would make every visitor look like loopback to /metrics. With
QORVEN_CLIENT_IP_HEADER set, a connection from one of QORVEN_TRUSTED_PROXIES takes the
address that header names. X-Forwarded-For is a list each proxy appends to: everything
before the last proxy's entry was written by the client, so the address taken is the
last one that is not itself a trusted proxy. A connection from anywhere else keeps its
own address, header or not: a client that reaches the server directly cannot choose the
address it is counted by. A header that names no address is ignored rather than failing
the request.
"""
from __future__ import annotations

import ipaddress
import logging
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class ForwardedClient:
    """ASGI: replaces `scope["client"]` with the address a trusted proxy forwards, in the
    scope the server made (so its access log names the client too), for HTTP and
    WebSockets alike; Django reads it as REMOTE_ADDR."""

    def __init__(self, app: Any) -> None:
        self.app = app
        name = settings.QORVEN_CLIENT_IP_HEADER
        self.header = header_key(name) if name else None
        self.trusted = [ipaddress.ip_network(n, strict=False) for n in settings.QORVEN_TRUSTED_PROXIES]
        self.untrusted_noted = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if self.header is not None and scope.get("type") in ("http", "websocket") and scope.get("client"):
            peer, port = scope["client"][0], scope["client"][1]
            forwarded = self._forwarded(scope, peer)
            if forwarded is not None:
                scope["client"] = (forwarded, port)
        return await self.app(scope, receive, send)

    def _forwarded(self, scope: dict[str, Any], peer: str) -> str | None:
        values = [value for key, value in scope.get("headers") or () if key == self.header]
        if not values:
            return None
        if not _within(peer, self.trusted):
            if not self.untrusted_noted:  # once: a host behind a proxy it did not list learns why
                self.untrusted_noted = True
                logger.warning("%s from %s ignored: it is not one of QORVEN_TRUSTED_PROXIES", self.header.decode(),
                               peer)
            return None
        entries = b",".join(values).decode("latin-1").split(",")
        for entry in reversed(entries):
            address = _address(entry)
            if address is None:
                return None  # not written by a proxy we know: nothing in it can be believed
            if not _within(address, self.trusted):
                return address
        return None


def header_key(name: str) -> bytes:
    """The ASGI header key of a header named as Django's META does (HTTP_X_REAL_IP) or as sent."""
    name = name.strip()
    if name.upper().startswith("HTTP_"):
        name = name[5:]
    return name.replace("_", "-").lower().encode("latin-1")


def _address(text: str) -> str | None:
    text = text.strip().strip('"')
    if text.startswith("[") and "]" in text:  # [2001:db8::1]:443
        text = text[1:text.index("]")]
    elif text.count(":") == 1:  # 203.0.113.9:443
        text = text.partition(":")[0]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _within(address: str, networks: list[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in network for network in networks)
