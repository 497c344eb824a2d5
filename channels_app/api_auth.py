"""Bearer-token authentication for the JSON API."""
from __future__ import annotations

from functools import wraps
from typing import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from tenancy.selectors import api_token_authenticate


def json_error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def stop_unavailable() -> JsonResponse:
    """A Stop that could not be passed on to its turn (the cache away): our notice, its code
    (a client tells it apart from another 503 by it: the database away, a proxy's), and
    when to try again."""
    from qorven.agent.stop import STOP_UNAVAILABLE, STOP_UNAVAILABLE_CODE
    from qorven.runtime.cache_away import CACHE_RETRY_DELAY

    response = JsonResponse({"error": STOP_UNAVAILABLE, "code": STOP_UNAVAILABLE_CODE}, status=503)
    response["Retry-After"] = str(int(CACHE_RETRY_DELAY))
    return response


def method_refused(request: HttpRequest, methods: tuple[str, ...]) -> JsonResponse | None:
    """A JSON 405 naming the methods (with Allow) when `request` uses another; else None."""
    if request.method in methods:
        return None
    response = json_error(405, f"use {' or '.join(methods)}")
    response["Allow"] = ", ".join(methods)
    return response


def json_methods(*methods: str) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Django's require_http_methods for a JSON endpoint: its 405 is JSON too."""
    def wrap(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def endpoint(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            return method_refused(request, methods) or view(request, *args, **kwargs)
        return endpoint
    return wrap


def page_json_route(path: str) -> bool:
    """Whether `path` (below QORVEN_URL_PREFIX) is one of the pages' JSON endpoints: the
    chat page's and the webchat's, whose refusals their scripts read as JSON."""
    return path.startswith("/chat/api/") or (path.startswith("/webchat/") and path.endswith("/messages"))


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW: a JSON endpoint's refusal is JSON (the page's own calls read it);
    a form's is Django's page."""
    if page_json_route(request.path_info):  # below QORVEN_URL_PREFIX
        return json_error(403, "the form's security token is missing or out of date: reload the page")
    from django.views.csrf import csrf_failure as page

    return page(request, reason)


API_PREFIX = "/v1/"
SERVER_ERROR = "something went wrong on our side; try again later"
# A page's script shows these as they are: a 400 there is a body Django could not read.
PAGE_ERRORS = {400: "the request could not be read: reload the page and try again"}


def api_error_handler(status: int, message: str, page: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A handler404/400/403/500: under /v1/ the API's JSON error (a path that names
    nothing, a host not allowed, a failure of ours), and the pages' JSON endpoints' (a
    body Django could not read, a failure of ours), whose scripts read JSON; elsewhere
    Django's `page`."""
    def handler(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
        if request.path_info.startswith(API_PREFIX):
            return json_error(status, message)
        if page_json_route(request.path_info):
            return json_error(status, PAGE_ERRORS.get(status, message))
        return page(request) if status == 500 else page(request, exception)
    return handler


def bearer_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Sets request.tenant, request.user and request.member_role (the user's role in the
    tenant, read with the token) from `Authorization: Bearer <token>`, or 401."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        header = request.headers.get("Authorization", "")
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            return _unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
        token = api_token_authenticate(raw=raw.strip())
        if token is None:
            return _unauthorized("invalid or revoked token")
        request.tenant = token.tenant  # type: ignore[attr-defined]
        request.user = token.user
        request.member_role = token.member_role  # type: ignore[attr-defined]
        return view(request, *args, **kwargs)

    return wrapper


def _unauthorized(message: str) -> JsonResponse:
    response = json_error(401, message)
    response["WWW-Authenticate"] = 'Bearer realm="qorven"'
    return response
