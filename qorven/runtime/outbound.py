"""Which servers this one may call at an address that came from the database.

URLs the host sets in the environment (OPENAI_BASE_URL, the platforms' API bases) are the
host's choice and are not checked here. A URL stored in the database — a Qor's model
route, edited in the admin — is: its host name is resolved and every address it resolves
to must be public. Loopback, private, link-local, shared, reserved and multicast ranges
are refused unless the host allows them by name, address or network in
QORVEN_ALLOW_PRIVATE_HOSTS (e.g. `127.0.0.1,ollama.internal,10.0.0.0/8` for a model
server on the local network). Checked when the URL is saved and again before each use,
so a name that later resolves somewhere private is caught.
"""
from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressRefused(Exception):
    """The URL's host is not one this server may call."""


def _allowed_explicitly(host: str, address: Address | None) -> bool:
    for entry in settings.QORVEN_ALLOW_PRIVATE_HOSTS:
        entry = entry.strip().lower()
        if not entry:
            continue
        if entry == host:
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue  # a host name, not this one
    return False


def _public(address: Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


def _addresses(host: str) -> list[Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []  # unresolvable now: nothing it could reach either
    return [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]


def check_url(url: str) -> None:
    """Raise AddressRefused unless `url` is http(s) to a host this server may call."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AddressRefused("only http and https URLs with a host are allowed")
    host = parts.hostname.lower().rstrip(".")
    if _allowed_explicitly(host, None):
        return
    for address in _addresses(host):
        if not _public(address) and not _allowed_explicitly(host, address):
            raise AddressRefused(
                f"{host} is a private, loopback or reserved address ({address}); "
                "the host can allow it in QORVEN_ALLOW_PRIVATE_HOSTS"
            )
