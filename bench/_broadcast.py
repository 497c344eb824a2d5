"""The baseline of bench/e2e.py's fan-out: a minimal broadcast server, run as its own
process (``python bench/_broadcast.py PORT``, aiohttp.web).

- ``GET /ws?chat=N``: a WebSocket, watching chat N (any string; default "0");
- ``POST /send?chat=N``: stamps ``created_at`` (wall clock, epoch seconds) into the JSON
  body, encodes it once and writes that one text frame to every socket watching chat N;
  answers with the number of sockets written to;
- ``GET /health``: 200.

What the measured server does per event at the least: one JSON encoding, a write per
socket. Nothing is stored."""
from __future__ import annotations

import json
import sys
import time
from collections import defaultdict

from aiohttp import WSMsgType, web

CHATS: defaultdict[str, set[web.WebSocketResponse]] = defaultdict(set)


async def ws(request: web.Request) -> web.WebSocketResponse:
    chat = request.query.get("chat", "0")
    sock = web.WebSocketResponse(heartbeat=None)
    await sock.prepare(request)
    await sock.send_str(json.dumps({"type": "session", "session_id": chat, "reset": True}))
    CHATS[chat].add(sock)
    try:
        async for frame in sock:
            if frame.type in (WSMsgType.ERROR, WSMsgType.CLOSE):
                break
    finally:
        CHATS[chat].discard(sock)
    return sock


async def send(request: web.Request) -> web.Response:
    event = await request.json()
    event["created_at"] = time.time()
    frame = json.dumps(event)
    sockets = list(CHATS.get(request.query.get("chat", "0"), ()))
    for sock in sockets:
        await sock.send_str(frame)
    return web.json_response({"sent": len(sockets)})


async def health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def main() -> None:
    app = web.Application()
    app.add_routes([web.get("/ws", ws), web.post("/send", send), web.get("/health", health)])
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()
