"""A small MCP server written with the SDK's server side, for tests: `python -m
tests.fakes.mcp_server stdio`, or `… http <port> [<bearer token>]` (streamable HTTP at
/mcp; with a token, a request without it is refused with 401)."""
from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("qorven-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """The text in capitals, as long as it is."""
    return text.upper()


@server.tool()
def process_id() -> int:
    """This server's process id (which process answered)."""
    return os.getpid()


@server.tool()
def hang() -> str:
    """Answers after a minute (past any sensible timeout)."""
    time.sleep(60)
    return "late"


def _http(port: int, token: str | None) -> None:
    import uvicorn
    from starlette.responses import JSONResponse

    app = server.streamable_http_app()
    if token:
        inner = app

        async def app(scope, receive, send):  # noqa: F811 (the guarded app)
            if scope["type"] == "http":
                headers = dict(scope.get("headers") or [])
                if headers.get(b"authorization") != f"Bearer {token}".encode():
                    await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
                    return
            await inner(scope, receive, send)

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        _http(int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
