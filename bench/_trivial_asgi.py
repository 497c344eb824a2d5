"""The baseline of bench/e2e.py's ingest: the least an ASGI app can do for a webhook —
read the body, answer 200 with a small JSON body — served by the same server software
(``daphne -b 127.0.0.1 -p PORT _trivial_asgi:app`` with bench/ on PYTHONPATH)."""
from __future__ import annotations

from typing import Any

BODY = b'{"ok": true}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    more = True
    while more:  # the whole request body, as a webhook view reads it
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
