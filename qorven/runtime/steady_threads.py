"""The JSON API's requests through Django on a few long-lived threads.

Under an ASGI server Django runs each request's sync middleware and view on a thread
made for that request, which borrows a database connection (from the pool on
PostgreSQL; on SQLite it opens the file) and gives it back at the end. For a request whose
own work is a few milliseconds, that round is a large part of it. `SteadyThreads` hands
the requests under its prefixes to Django's own handler — the same middleware, view and
response — on a small fixed set of threads that each keep their connection from one
request to the next. What Django's request signals would do between requests is done
here: a connection an error left unusable, or in a transaction, is closed.

Everything else (pages, the admin, static files, WebSockets) goes on to the app as before.
"""
from __future__ import annotations

import asyncio
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler, ASGIRequest
from django.core.handlers.base import BaseHandler
from django.db import connections
from django.http import HttpResponseBase
from django.urls import set_script_prefix, set_urlconf

from .database import connections_drop_broken
from .url_prefix import app_path

THREADS = 4  # requests at once on this path (each keeps one database connection)


class SteadyThreads:
    """ASGI middleware: HTTP requests whose path (below QORVEN_URL_PREFIX) starts with one of `prefixes` run through
    Django's sync handler on THREADS long-lived threads; the rest go to `app`."""

    def __init__(self, app: Any, asgi_handler: ASGIHandler, prefixes: tuple[str, ...]) -> None:
        self.app = app
        self.asgi_handler = asgi_handler  # for its way of sending a response over ASGI
        self.prefixes = prefixes
        self._handler: BaseHandler | None = None
        self._threads = ThreadPoolExecutor(THREADS, thread_name_prefix="qorven-api")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not app_path(scope).startswith(self.prefixes):
            return await self.app(scope, receive, send)
        body = tempfile.SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b")
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return  # the client left: nothing to answer
                body.write(message.get("body", b""))
                if not message.get("more_body"):
                    break
            body.seek(0)
            response = await asyncio.get_running_loop().run_in_executor(self._threads, self._respond, scope, body)
            try:
                await self.asgi_handler.send_response(response, send)
            finally:
                # What ends a request, but the signal that would close the thread's connections.
                for closer in response._resource_closers:
                    closer()
                response.closed = True
        finally:
            body.close()

    def connections_close(self) -> None:
        """Close the database connections of every thread (before the database goes away:
        a test run's end). Each thread takes one of these jobs: they wait for each other."""
        together = threading.Barrier(THREADS)

        def close(_: int) -> None:
            together.wait(30)
            connections.close_all()

        list(self._threads.map(close, range(THREADS)))

    def _respond(self, scope: dict[str, Any], body: Any) -> HttpResponseBase:
        handler = self._handler
        if handler is None:
            handler = BaseHandler()
            handler.load_middleware(is_async=False)
            self._handler = handler
        set_urlconf(settings.ROOT_URLCONF)
        request = ASGIRequest(scope, body)
        set_script_prefix(request.script_name)  # reverse()'s, as Django's handler sets it (QORVEN_URL_PREFIX)
        try:
            return handler.get_response(request)
        finally:
            _connections_tidy()


def _connections_tidy() -> None:
    """After a request, on its thread: a connection an error left unusable, or one left
    inside a transaction, is closed (the next request opens a fresh one); a healthy one is
    kept for the next request."""
    connections_drop_broken()
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and not conn.in_atomic_block and not conn.get_autocommit():
            conn.close()
