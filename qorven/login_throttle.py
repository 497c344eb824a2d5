"""Password guessing is throttled on both sign-in forms (the chat's and the admin's).

Failed sign-ins are counted in the cache with django-ratelimit, per username and per
client address (QORVEN_CLIENT_IP_HEADER behind a proxy, as for the webchat limits). Past
QORVEN_LOGIN_FAILURES_PER_USER or QORVEN_LOGIN_FAILURES_PER_ADDRESS, the form answers
429 "Too many failed sign-ins. Try again in N minutes." without checking the password,
until the window ends — the right password included, so guessing gains nothing.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django_ratelimit.core import get_usage


def _username(group: str, request: HttpRequest) -> str:
    return "user:" + request.POST.get("username", "").strip().lower()


def _limits() -> list[tuple[str, object, str]]:
    return [
        ("login.user", _username, settings.QORVEN_LOGIN_FAILURES_PER_USER),
        ("login.address", "ip", settings.QORVEN_LOGIN_FAILURES_PER_ADDRESS),
    ]


def _wait(request: HttpRequest) -> float | None:
    """Seconds until sign-in is open again for this request, or None when it is."""
    waits = []
    for group, key, rate in _limits():
        usage = get_usage(request, group=group, key=key, rate=rate, method="POST", increment=False)
        if usage is not None and usage["count"] >= usage["limit"]:
            waits.append(usage["time_left"])
    return max(waits) if waits else None


def _count_failure(request: HttpRequest) -> None:
    for group, key, rate in _limits():
        get_usage(request, group=group, key=key, rate=rate, method="POST", increment=True)


def login_throttled(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap a Django login view: refuse while throttled, count each failed POST."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if request.method != "POST":
            return view(request, *args, **kwargs)
        wait = _wait(request)
        if wait is not None:
            minutes = max(1, math.ceil(wait / 60))
            response = TemplateResponse(request, "registration/throttled.html", {"minutes": minutes}, status=429)
            response["Retry-After"] = str(max(1, int(wait)))
            return response
        response = view(request, *args, **kwargs)
        if response.status_code == 200:  # the form came back: the sign-in failed
            _count_failure(request)
        return response

    return wrapper
