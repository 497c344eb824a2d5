"""A person's export over HTTP: `GET /v1/export` (the API token's own user, in the token's
tenant) and the chat page's "Download my data" (signed in, the page's tenant). Both stream
the file as it is read (channels_app.data_export) and share one allowance per person,
QORVEN_EXPORT_RATE: an export reads everything the person has, so a loop of them must
not be able to keep the database busy."""
from __future__ import annotations

import logging
import time
from collections.abc import Generator

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.utils import timezone
from django.utils.http import content_disposition_header
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET
from django_ratelimit.core import get_usage

from qorven.runtime.read_snapshot import read_snapshot_idle_limit
from tenancy.errors import NotFound

from .api_auth import bearer_required, json_error, json_methods
from .data_export import ExportScope, PersonExport, export_blocks, export_scope

logger = logging.getLogger(__name__)

ATTACHMENTS = {"": False, "0": False, "false": False, "1": True, "true": True}


class Refused(Exception):
    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


@csrf_exempt
@json_methods("GET")
@bearer_required
def api_export(request: HttpRequest) -> HttpResponse:
    """GET `?qor=&attachments=1`: the token's user's data in the token's tenant. A token
    speaks for one tenant: `?tenant=` naming another is not found, like a missing one."""
    own = request.tenant.slug  # type: ignore[attr-defined]
    asked = request.GET.get("tenant") or own
    try:
        if asked != own:
            raise NotFound(f"no tenant {asked!r}")  # export_scope's words for one the user is not in
        return _export(request, export_scope(tenant_slug=own, user=request.user,  # type: ignore[arg-type]
                                             qor_slug=request.GET.get("qor") or None))
    except NotFound as exc:
        return json_error(404, str(exc))
    except Refused as exc:
        response = json_error(exc.status, str(exc))
        if exc.retry_after is not None:
            response["Retry-After"] = str(exc.retry_after)
        return response


@require_GET
@login_required
def chat_export(request: HttpRequest, tenant_slug: str) -> HttpResponse:
    """GET `?qor=&attachments=1`: the signed-in person's data in the tenant whose chat page
    links here ("Download my data"). A page, not one of the page's JSON endpoints: a link
    followed in the browser, so signed out it leads to the sign-in, and a tenant they are
    not a member of is the 404 page, as a missing one."""
    try:
        scope = export_scope(tenant_slug=tenant_slug, user=request.user,  # type: ignore[arg-type]
                             qor_slug=request.GET.get("qor") or None)
    except NotFound:
        raise Http404("no such tenant") from None
    try:
        return _export(request, scope)
    except Refused as exc:  # a link followed in the browser: words to read, not JSON
        response = HttpResponse(str(exc), status=exc.status, content_type="text/plain; charset=utf-8")
        if exc.retry_after is not None:
            response["Retry-After"] = str(exc.retry_after)
        return response


def _export(request: HttpRequest, scope: ExportScope) -> StreamingHttpResponse:
    attachments = ATTACHMENTS.get(request.GET.get("attachments", "").lower())
    if attachments is None:
        raise Refused(400, "attachments takes 1 (include the files' data) or 0")
    # Counted once the export is sure to start, per person whichever way they ask.
    usage = get_usage(request, group="export", key=lambda group, request: f"user:{scope.user.pk}",
                      rate=settings.QORVEN_EXPORT_RATE, increment=True)
    if usage is not None and usage["should_limit"]:
        wait = max(1, int(usage["time_left"]))
        raise Refused(429, f"Too many exports at once: try again in {_duration(wait)}.", retry_after=wait)
    export = PersonExport(tenant=scope.tenant, user=scope.user, qor=scope.qor, attachments=attachments)
    blocks = _within(export_blocks(export.lines()), settings.QORVEN_EXPORT_TIMEOUT, user=scope.user.pk)
    response = StreamingHttpResponse(
        _AsyncBytes(blocks) if isinstance(request, ASGIRequest) else _bytes(blocks),
        content_type="application/x-ndjson; charset=utf-8",
    )
    name = f"qorven-{scope.tenant.slug}-{scope.user.get_username()}-{timezone.localdate().isoformat()}.jsonl"
    response["Content-Disposition"] = content_disposition_header(True, name)
    response["Cache-Control"] = "private, no-store"
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _within(blocks: Generator[str, None, None], seconds: int, *, user: int) -> Generator[str, None, None]:
    """The blocks for at most `seconds`: a download read slower than that (a client taking a
    block now and then, or none at all) ends there without its `end` line, so the export's
    snapshot is held no longer — stalled, it is PostgreSQL that ends it
    (read_snapshot_idle_limit). Each step runs where the blocks are read, in the snapshot."""
    deadline = time.monotonic() + seconds
    try:
        while True:
            if time.monotonic() >= deadline:  # checked before reading: a stalled snapshot is gone by now
                logger.info("an export of user %s was read for longer than QORVEN_EXPORT_TIMEOUT (%s s) and is "
                            "cut short", user, seconds)
                return
            block = next(blocks, None)
            if block is None:
                return
            read_snapshot_idle_limit(deadline - time.monotonic())
            yield block
    finally:
        blocks.close()


def _bytes(blocks: Generator[str, None, None]) -> Generator[bytes, None, None]:
    """The blocks for a WSGI server. The response closes this when it is done or the
    client has gone, on the request's thread: the export's snapshot ends then, before the
    request's connection is closed (given back to the pool)."""
    try:
        for block in blocks:
            yield block.encode()
    finally:
        blocks.close()


class _AsyncBytes:
    """The blocks for an ASGI server, one at a time. Given a plain iterator, Django's ASGI
    handler reads all of it into a list before sending the first byte (the whole export in
    memory); here each block is read on the request's own thread (its database connection,
    in the export's snapshot) as the one before has gone out. `close` is the response's
    closer, which Django's ASGI handler calls on that same thread once the response is sent
    or the client has gone: the snapshot ends there, not wherever an abandoned async
    generator would be finalized."""

    def __init__(self, blocks: Generator[str, None, None]) -> None:
        self._blocks = blocks
        self._pull = sync_to_async(_next_block, thread_sensitive=True)

    def __aiter__(self) -> _AsyncBytes:
        return self

    async def __anext__(self) -> bytes:
        block = await self._pull(self._blocks)
        if block is None:
            raise StopAsyncIteration
        return block.encode()

    def close(self) -> None:
        self._blocks.close()


def _next_block(blocks: Generator[str, None, None]) -> str | None:
    return next(blocks, None)


def _duration(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} second{'' if seconds == 1 else 's'}"
    minutes = -(-seconds // 60)
    return f"{minutes} minutes" if minutes < 120 else f"{-(-minutes // 60)} hours"
