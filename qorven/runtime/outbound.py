"""Which servers this one may call at an address that came from the database.

URLs the host sets in the environment (OPENAI_BASE_URL, the platforms' API bases) are the
host's choice and are not checked here. A URL stored in the database — a Qor's model
routes and fallbacks, an MCP server, edited in the admin — is: its host name is resolved
and every address it resolves to must be public. Loopback, private, link-local, shared,
reserved and multicast ranges are refused unless the host allows them by name, address
or network in QORVEN_ALLOW_PRIVATE_HOSTS (e.g. `127.0.0.1,ollama.internal,10.0.0.0/8`
for a model server on the local network).

`check_url` applies the policy when the URL is saved and again before each use, with a
clear error. It cannot be the only guard: the HTTP client resolves the name again to
connect, and a name whose DNS answers a public address to the check and 127.0.0.1 or
169.254.169.254 to the connection (DNS rebinding) would reach what the check refused. So
the clients of stored URLs connect through qorven.runtime.outbound_transport: each
connection resolves the name once, applies `check_addresses` to what it got, and connects
only to those addresses (redirects included; TLS is still verified against the name).
Those clients connect directly, not through an HTTP(S)_PROXY of the environment, whose
own resolution no check here could see, unless the host opts in with
QORVEN_OUTBOUND_PROXY (`env`: the environment's HTTPS_PROXY, HTTP_PROXY, ALL_PROXY and
NO_PROXY; or a proxy's URL). Then each request that goes through the proxy is checked
first with `check_url` (the name resolved here; a name that does not resolve here is left
to the proxy, whose own rules decide what it reaches) and sent to the proxy, which
resolves the name again; a host NO_PROXY names is connected to directly, as above. The
host's own clients (OPENAI_BASE_URL, the platforms' API bases) always follow the
environment's proxy variables, as any HTTP client does. A refused connection or request
fails as a connection error whose cause is an AddressRefused (`address_refusal` finds it).
"""
from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
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


# IPv6 ranges whose last 32 bits are an IPv4 address the packet ends up at: NAT64's
# well-known prefix (RFC 6052, which a DNS64 resolver answers with), the IPv4-translated
# (RFC 2765) and the deprecated IPv4-compatible forms. The mapped form (::ffff:0:0/96) and
# 6to4 (2002::/16) have ipaddress's own accessors.
_CARRYING_IPV4 = tuple(ipaddress.ip_network(n) for n in ("64:ff9b::/96", "::ffff:0:0:0/96", "::/96"))


def _carried_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one reaches through a gateway, a relay or the host's own
    stack, if it carries one."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in network for network in _CARRYING_IPV4):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _public(address: Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        if address.is_site_local:  # fec0::/10: deprecated, still routed on some networks; ipaddress calls it global
            return False
        address = _carried_ipv4(address) or address
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


def check_addresses(host: str, addresses: Iterable[Address]) -> None:
    """Raise AddressRefused unless `host` may be called at every one of `addresses` (what
    its name resolved to)."""
    host = host.lower().rstrip(".")
    if _allowed_explicitly(host, None):
        return
    for address in addresses:
        if not _public(address) and not _allowed_explicitly(host, address):
            raise AddressRefused(
                f"{host} is a private, loopback or reserved address ({address}); "
                "the host can allow it in QORVEN_ALLOW_PRIVATE_HOSTS"
            )


def check_url(url: str) -> None:
    """Raise AddressRefused unless `url` is http(s) to a host this server may call."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AddressRefused("only http and https URLs with a host are allowed")
    host = parts.hostname.lower().rstrip(".")
    if _allowed_explicitly(host, None):
        return
    check_addresses(host, _addresses(host))


def address_refusal(exc: BaseException) -> AddressRefused | None:
    """The AddressRefused behind a client's error (a guarded connection refused), if any."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, AddressRefused):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None
