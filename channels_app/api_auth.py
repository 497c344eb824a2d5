"""Bearer-token authentication for the JSON API."""
from __future__ import annotations

from functools import wraps
from typing import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from tenancy.selectors import api_token_authenticate


def json_error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


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
