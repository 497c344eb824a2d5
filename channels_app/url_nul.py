"""A NUL character in a request's address is refused before any view reads it.

No route takes one: slugs, webchat keys, search words and query parameters are text, and
PostgreSQL refuses NUL in text ("PostgreSQL text fields cannot contain NUL (0x00) bytes"),
so a lookup by a key, a Qor's or a tenant's name holding `%00` failed with a DataError —
a 500, and an error logged, that anyone could cause on the webchat's public routes. SQLite
took it and found nothing. Refused here, it is a 400 on either database (JSON where the
route speaks JSON), whatever the route.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from .api_auth import API_PREFIX, json_error, page_json_route

NUL = "\x00"
REFUSED = "the address holds a NUL character (%00), which nothing here takes"


class NulInAddressMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        if NUL in request.path or _query_holds_nul(request):
            path = request.path_info
            if path.startswith(API_PREFIX) or page_json_route(path):
                return json_error(400, REFUSED)
            return HttpResponse(REFUSED, status=400, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


def _query_holds_nul(request: HttpRequest) -> bool:
    query = request.META.get("QUERY_STRING", "")
    # The parsed parameters are read only when the raw text can hold one (%00, or NUL itself).
    if "%00" not in query and NUL not in query:
        return False
    return any(NUL in key or any(NUL in value for value in values) for key, values in request.GET.lists())
