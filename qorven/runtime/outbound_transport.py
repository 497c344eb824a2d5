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
"""
from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import anyio
import httpcore2
import httpx2

from .outbound import AddressRefused, check_addresses

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
                      verify: ssl.SSLContext | bool = True) -> httpx2.HTTPTransport:
    """A transport for an httpx2.Client (the openai SDK's `http_client`) to stored URLs.
    Give it the client's limits: a client with a transport of its own does not apply them."""
    context = httpx2.create_ssl_context(verify=verify)
    return _with_pool(httpx2.HTTPTransport(verify=context, limits=limits), httpcore2.ConnectionPool(
        ssl_context=context, max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
        network_backend=_GuardedBackend(),
    ))


def guarded_async_transport(*, limits: httpx2.Limits = DEFAULT_LIMITS,
                            verify: ssl.SSLContext | bool = True) -> httpx2.AsyncHTTPTransport:
    """The same for an httpx2.AsyncClient."""
    context = httpx2.create_ssl_context(verify=verify)
    return _with_pool(httpx2.AsyncHTTPTransport(verify=context, limits=limits), httpcore2.AsyncConnectionPool(
        ssl_context=context, max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
        network_backend=_GuardedAsyncBackend(),
    ))


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
