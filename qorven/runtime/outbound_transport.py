"""HTTP transports for URLs stored in the database: each connection resolves the host name
once, keeps to the address policy with what it resolved (qorven.runtime.outbound), and
connects only to those addresses, so a name cannot answer the check one address and the
connection another. The model clients of stored routes (qorven.llm.openai_provider) and
the MCP servers' client (qorven.agent.mcp) use them; both speak httpx2 (the openai SDK's
and the mcp SDK's HTTP library), whose transports run on an httpcore2 pool.

Only where the TCP connection is made changes: the pool, keep-alive, streaming, timeouts
and TLS are the libraries' own, and TLS is started on the connected socket with the host
NAME (SNI and the certificate check), as for any other connection. A refused address is a
`ConnectionRefusedByPolicy`: an httpcore2.ConnectError, so the clients report it as the
connection error it is (the openai SDK's APIConnectionError, never a timeout), and an
AddressRefused, which `qorven.runtime.outbound.address_refusal` finds behind it.

Behind an outbound proxy (QORVEN_OUTBOUND_PROXY: `env` for the environment's HTTPS_PROXY,
HTTP_PROXY, ALL_PROXY and NO_PROXY, read as the host's own clients read them, or a proxy's
URL, NO_PROXY still applying), a request whose URL goes through the proxy is first checked
by `check_url`, its host name resolved here; a refusal is the same connection error. The
request then goes to the proxy (CONNECT and TLS to the name for https, the absolute URL for
http), which resolves the name itself: a name that does not resolve here is left to the
proxy, and what the proxy then reaches is for its own rules to decide. A host NO_PROXY
names is connected to directly, under the guard above. The proxy's own address is the
host's choice and is not checked; its credentials are never shown (`proxy_for`).
"""
from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
from collections.abc import Iterable
from typing import Any
from urllib.request import getproxies

import anyio
import httpcore2
import httpx2
from django.conf import settings

from .environment import url_without_credentials
from .outbound import AddressRefused, check_addresses, check_url

logger = logging.getLogger(__name__)

DEFAULT_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=20)  # httpx2's own default


class ConnectionRefusedByPolicy(AddressRefused, httpcore2.ConnectError):
    """The name resolved to an address this server may not call."""


def _allowed(host: str, infos: Iterable[tuple[Any, ...]]) -> list[str]:
    """The addresses to connect to, in the resolver's order, once each; raises
    ConnectionRefusedByPolicy when any of them is refused, as check_url does."""
    found: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in found:
            found.append(address)
    if not found:
        raise httpcore2.ConnectError(f"{host} resolved to no address")
    try:
        check_addresses(host, (ipaddress.ip_address(a.split("%")[0]) for a in found))
    except AddressRefused as exc:
        raise ConnectionRefusedByPolicy(str(exc)) from None
    return found


class _GuardedBackend(httpcore2.SyncBackend):
    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore2.NetworkStream:
        try:
            infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
        failure: Exception | None = None
        # Each address in turn with the whole timeout, as socket.create_connection does.
        for address in _allowed(host, infos):
            try:
                return super().connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                           socket_options=socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure


class _GuardedAsyncBackend(httpcore2.AnyIOBackend):
    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore2.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except TimeoutError as exc:
            raise httpcore2.ConnectTimeout(f"resolving {host} timed out") from exc
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
        failure: Exception | None = None
        for address in _allowed(host, infos):
            try:
                return await super().connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                                 socket_options=socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure


def guarded_transport(*, limits: httpx2.Limits = DEFAULT_LIMITS,
                      verify: ssl.SSLContext | bool = True) -> httpx2.BaseTransport:
    """A transport for an httpx2.Client (the openai SDK's `http_client`) to stored URLs,
    through the outbound proxy where QORVEN_OUTBOUND_PROXY sends them. Give it the client's
    limits: a client with a transport of its own does not apply them."""
    context = httpx2.create_ssl_context(verify=verify)
    direct = _with_pool(httpx2.HTTPTransport(verify=context, limits=limits), httpcore2.ConnectionPool(
        ssl_context=context, max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
        network_backend=_GuardedBackend(),
    ))
    routes = _routes(lambda proxy: httpx2.HTTPTransport(verify=context, limits=limits, proxy=proxy))
    return _Routed(direct, routes) if routes else direct


def guarded_async_transport(*, limits: httpx2.Limits = DEFAULT_LIMITS,
                            verify: ssl.SSLContext | bool = True) -> httpx2.AsyncBaseTransport:
    """The same for an httpx2.AsyncClient."""
    context = httpx2.create_ssl_context(verify=verify)
    direct = _with_pool(httpx2.AsyncHTTPTransport(verify=context, limits=limits), httpcore2.AsyncConnectionPool(
        ssl_context=context, max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
        network_backend=_GuardedAsyncBackend(),
    ))
    routes = _routes(lambda proxy: httpx2.AsyncHTTPTransport(verify=context, limits=limits, proxy=proxy))
    return _AsyncRouted(direct, routes) if routes else direct


def proxy_for(url: str) -> str | None:
    """The proxy a request to the stored `url` goes through (its scheme, host and port,
    never its credentials), or None: connected to directly."""
    try:
        target = httpx2.URL(url)
    except httpx2.InvalidURL:
        return None
    for pattern, proxy in _proxy_map():
        if pattern.matches(target):
            if proxy is None:
                return None
            shown = httpx2.URL(proxy)
            return f"{shown.scheme}://{shown.netloc.decode('ascii').rpartition('@')[2]}"
    return None


def _proxy_map() -> list[tuple[Any, str | None]]:
    """(URL pattern, proxy URL or None for direct) by QORVEN_OUTBOUND_PROXY, the most
    specific pattern first, as httpx2 orders a client's mounts; NO_PROXY as the host's own
    clients read it (httpx2's reading of the environment, which the openai SDK's default
    client uses)."""
    setting = settings.QORVEN_OUTBOUND_PROXY
    if not setting:
        return []
    # httpx2's own reading of the proxy variables and its mounts' patterns (not exported):
    # NO_PROXY then means here exactly what it means to the host's own clients.
    from httpx2._utils import URLPattern, get_environment_proxies

    environment = get_environment_proxies()
    if setting == "env":
        mounts = environment
    elif "*" in (host.strip() for host in getproxies().get("no", "").split(",")):
        return []  # NO_PROXY=*: no proxy for anything
    else:
        mounts = {"all://": setting, **{key: None for key, proxy in environment.items() if proxy is None}}
    found = []
    for key, proxy in mounts.items():
        if proxy is not None and not _usable(proxy):
            if proxy not in _skipped:  # once a process, not at every client built
                _skipped.add(proxy)
                logger.warning("outbound proxy %s skipped: only http:// and https:// proxies are used; stored "
                               "URLs it would have carried are connected to directly", url_without_credentials(proxy))
            proxy = None
        found.append((URLPattern(key), proxy))
    return sorted(found, key=lambda route: route[0])


_skipped: set[str] = set()


def _usable(proxy: str) -> bool:
    try:
        return httpx2.URL(proxy).scheme in ("http", "https")
    except httpx2.InvalidURL:
        return False


def _routes(build: Any) -> list[tuple[Any, Any]]:
    """The proxy map with a transport built for each proxy (one per proxy URL); None: direct."""
    built: dict[str, Any] = {}
    routes = []
    for pattern, proxy in _proxy_map():
        if proxy is not None and proxy not in built:
            built[proxy] = build(httpx2.Proxy(proxy))
        routes.append((pattern, None if proxy is None else built[proxy]))
    return routes if any(transport is not None for _, transport in routes) else []


def _route(routes: list[tuple[Any, Any]], url: httpx2.URL) -> Any:
    for pattern, transport in routes:
        if pattern.matches(url):
            return transport
    return None


class _Routed(httpx2.BaseTransport):
    """Each request direct (guarded) or, its target checked first, through its proxy."""

    def __init__(self, direct: httpx2.BaseTransport, routes: list[tuple[Any, Any]]) -> None:
        self._direct, self._routes = direct, routes

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        proxied = _route(self._routes, request.url)
        if proxied is None:
            return self._direct.handle_request(request)
        try:
            check_url(str(request.url))
        except AddressRefused as exc:
            raise httpx2.ConnectError(str(exc), request=request) from exc  # address_refusal finds exc
        return proxied.handle_request(request)

    def close(self) -> None:
        self._direct.close()
        for transport in {id(t): t for _, t in self._routes if t is not None}.values():
            transport.close()


class _AsyncRouted(httpx2.AsyncBaseTransport):
    def __init__(self, direct: httpx2.AsyncBaseTransport, routes: list[tuple[Any, Any]]) -> None:
        self._direct, self._routes = direct, routes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        proxied = _route(self._routes, request.url)
        if proxied is None:
            return await self._direct.handle_async_request(request)
        try:
            await anyio.to_thread.run_sync(check_url, str(request.url))  # it resolves the name: off the loop
        except AddressRefused as exc:
            raise httpx2.ConnectError(str(exc), request=request) from exc  # address_refusal finds exc
        return await proxied.handle_async_request(request)

    async def aclose(self) -> None:
        await self._direct.aclose()
        for transport in {id(t): t for _, t in self._routes if t is not None}.values():
            await transport.aclose()


def _with_pool(transport: Any, pool: Any) -> Any:
    """`transport` sending through `pool`. httpx2's transports (2.17) build their httpcore2
    pool in __init__ and take no network backend, so the guarded pool replaces theirs in
    `_pool`, the one private attribute this module touches (their request handling, error
    mapping and streams stay theirs). Should a release keep its pool elsewhere, this fails
    here, at the first client built, instead of leaving the libraries' own pool in use —
    and tests/qorven/test_outbound_transport.py fails with it."""
    if type(getattr(transport, "_pool", None)) is not type(pool):
        raise RuntimeError(f"httpx2 {httpx2.__version__}: {type(transport).__name__} no longer keeps its "
                           "connection pool in _pool; qorven.runtime.outbound_transport must be updated")
    transport._pool = pool
    return transport
