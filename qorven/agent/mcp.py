"""Tools of MCP servers, offered to the model beside the built-in ones, through the
official `mcp` SDK.

A Qor's MCP servers (tenancy.models.McpServer) are read with the Qor; each one's tools are
listed when first needed and again once the list is QORVEN_MCP_TOOLS_TTL seconds old (or
the server's row changed), and kept on the row. A server's tools are offered on a turn
when the server is enabled, the tenant has not switched `mcp:<server>` off, the surface's
trust reaches the server's minimum (owner unless set lower), and the Qor's allowlist, if
it has one, names `mcp:<server>` or `mcp:<server>:<tool>`.

The model sees each tool as `mcp_<server>_<tool>`. Calls go through the session this
process keeps open to the server (qorven.agent.mcp_sessions: opened on first use, closed
when idle, changed or failed); opening it and each call have QORVEN_MCP_TIMEOUT seconds.
A result's text is cut to QORVEN_MCP_RESULT_CHARS with a note. A server that fails, hangs
or answers an error becomes a tool error the model reads; the turn goes on.
"""
from __future__ import annotations

import json
import logging
import re
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from qorven.runtime.cache_away import cache_or
from qorven.runtime.repeated_failure import RepeatedFailure
from tenancy.models import McpServer, Qor, Tenant
from tenancy.selectors import mcp_servers_read
from tenancy.switches import tools_enabled
from tenancy.tool_registry import Tool, ToolContext, ToolError
from tenancy.trust import trust_allows

from .mcp_sessions import mcp_call

logger = logging.getLogger(__name__)

_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def model_name(server: str, tool: str) -> str:
    """The function name the model calls (OpenAI's names allow letters, digits, _ and -)."""
    return _NAME_UNSAFE.sub("_", f"mcp_{server}_{tool}")[:64]


def mcp_tools_offered(*, tenant: Tenant, qor: Qor, trust: str) -> list[Tool]:
    servers = [s for s in mcp_servers_read(qor=qor) if s.enabled and trust_allows(trust, s.min_trust)]
    if not servers:
        return []
    switched_on = tools_enabled(tenant, [f"mcp:{s.name}" for s in servers])
    offered: list[Tool] = []
    for server in servers:
        if f"mcp:{server.name}" not in switched_on:
            continue
        for spec in _listed(server):
            name = spec.get("name", "")
            allow = qor.tool_allowlist
            if allow and f"mcp:{server.name}" not in allow and f"mcp:{server.name}:{name}" not in allow:
                continue
            offered.append(Tool(
                name=model_name(server.name, name),
                description=(spec.get("description") or f"{name} (MCP server {server.name})")[:1024],
                parameters=spec.get("input_schema") or {"type": "object", "properties": {}},
                handler=_caller(server, name),
                min_trust=server.min_trust,
            ))
    return offered


# A server whose listing failed is let be (its last list, or none, is offered) for this
# long, doubled after each failure in a row up to LIST_BACKOFF_MAX: listing happens on a
# turn, and one that hangs held every turn for QORVEN_MCP_TIMEOUT, questions that never use
# it included. Kept in the cache, so every process of the install lets it be.
LIST_BACKOFF = 60.0
LIST_BACKOFF_MAX = 900.0
# With the cache away (Redis down) no server is let be: each turn lists what it must.
_backoff_away = RepeatedFailure(logger, "MCP servers' listing failures cannot be read or kept in the cache; "
                                        "servers are listed as if none had failed")


def _listed(server: McpServer) -> list[dict[str, Any]]:
    """The server's tools, listed again when the list is older than QORVEN_MCP_TOOLS_TTL."""
    fresh_after = timezone.now() - timedelta(seconds=settings.QORVEN_MCP_TOOLS_TTL)
    if server.tools_listed_at is not None and server.tools_listed_at > fresh_after:
        return server.tools
    key = f"mcp-list-failed:{server.pk}:{server.updated_at.timestamp()}"  # saving the server tries again
    failures = cache_or(None, lambda: cache.get(key), away=_backoff_away)
    if failures is not None and failures.get("until", 0) > timezone.now().timestamp():
        return server.tools
    try:
        tools = mcp_call(server, _client, _list_tools)
    except Exception as exc:  # a server that is down offers what it offered last, or nothing
        count = (failures or {}).get("count", 0) + 1
        wait = min(LIST_BACKOFF * 2 ** (count - 1), LIST_BACKOFF_MAX)
        failed = {"count": count, "until": timezone.now().timestamp() + wait}
        cache_or(None, lambda: cache.set(key, failed, LIST_BACKOFF_MAX * 2), away=_backoff_away)
        logger.warning("could not list the tools of MCP server %s of %s (%s); not tried again for %.0f s",
                       server.name, server.qor_id, type(exc).__name__, wait)
        return server.tools
    if failures is not None:
        cache_or(None, lambda: cache.delete(key), away=_backoff_away)
    McpServer.objects.filter(pk=server.pk).update(tools=tools, tools_listed_at=timezone.now())
    server.tools, server.tools_listed_at = tools, timezone.now()
    return tools


def _caller(server: McpServer, tool: str):
    def call(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        if ctx.qor.pk != server.qor_id:  # never another Qor's (or tenant's) server
            raise ToolError("this MCP server is not available here")
        try:
            result = mcp_call(server, _client, lambda client: _call_tool(client, tool, arguments))
        except TimeoutError:
            raise ToolError(f"the MCP server {server.name} did not answer within "
                            f"{settings.QORVEN_MCP_TIMEOUT:.0f} s") from None
        except ToolError:
            raise
        except Exception as exc:
            logger.warning("MCP server %s failed a call of %s: %r", server.name, tool, exc)
            raise ToolError(f"the MCP server {server.name} failed ({type(exc).__name__})") from None
        return _bounded(result)

    return call


def _bounded(text: str) -> str:
    limit = settings.QORVEN_MCP_RESULT_CHARS
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[… cut: the tool returned {len(text)} characters, {limit} are shown]"


# --- talking to a server (the SDK is async: sessions live on a loop of their own, mcp_sessions) ---

def _client(server: McpServer):
    from contextlib import asynccontextmanager

    from mcp import Client

    timeout = settings.QORVEN_MCP_TIMEOUT
    if server.kind == McpServer.Kind.STDIO:
        from mcp.client.stdio import StdioServerParameters

        command, *args = server.command
        return Client(StdioServerParameters(command=command, args=args), read_timeout_seconds=timeout)

    @asynccontextmanager
    async def http():
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        from qorven.runtime.outbound import check_url
        from qorven.runtime.outbound_transport import guarded_async_transport

        check_url(server.url)  # the address policy, again before each use, with a clear error
        headers = {"Authorization": f"Bearer {server.bearer_token}"} if server.bearer_token else {}
        # And on every connection: the name is resolved again to connect, maybe elsewhere by then.
        async with httpx2.AsyncClient(headers=headers, timeout=timeout, transport=guarded_async_transport()) as web:
            async with Client(streamable_http_client(server.url, http_client=web), read_timeout_seconds=timeout) as c:
                yield c

    return http()


async def _list_tools(client) -> list[dict[str, Any]]:
    listed = await client.list_tools()
    return [{"name": t.name, "description": t.description or "", "input_schema": t.input_schema}
            for t in listed.tools]


async def _call_tool(client, tool: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(tool, arguments)
    parts = []
    for block in result.content or []:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')}]")
    text = "\n".join(parts)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False, default=str)
    if result.is_error:
        raise ToolError(f"the MCP tool {tool} answered an error: {text[:500]}")
    return text
