"""Password guessing is throttled on both sign-in forms (the chat's and the admin's).

Failed sign-ins are counted in the cache with django-ratelimit, per username and per
client address (QORVEN_CLIENT_IP_HEADER behind a proxy, as for the webchat limits). Past
QORVEN_LOGIN_FAILURES_PER_USER or QORVEN_LOGIN_FAILURES_PER_ADDRESS, the form answers
429 "Too many failed sign-ins. Try again in N minutes." without checking the password,
until the window ends — the right password included, so guessing gains nothing.

A lock per username or per address alone would let anyone lock a known person out, again
and again, by failing as them — or from their address, an office's behind one NAT. So, as
OWASP's "device cookies" have it, a browser that signs in gets a signed, long-lived cookie
naming who signed in (`DEVICE_COOKIE`). An attempt carrying a valid one for the username
tried is held by neither that username's count nor its address's: its failures are
counted, and limited at the per-username rate, per device cookie instead — a stolen
cookie still cannot guess without limit, and its failures lock out neither its owner
elsewhere nor the others at its address. Every other attempt is held by both.
"""
from __future__ import annotations

import math
import secrets
import unicodedata
from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.core import signing
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django_ratelimit.core import get_usage

DEVICE_COOKIE = "qorven_device"
# Long enough that a person who signs in now and then keeps it; each sign-in renews it.
DEVICE_COOKIE_AGE = 365 * 24 * 3600
_DEVICE_SALT = "qorven.login_throttle.device"


def _tried(request: HttpRequest) -> str:
    """The username tried, as the sign-in form reads it (Unicode's NFKC: "ｇuess" signs in
    as "guess"), so every spelling of one name is counted as that name."""
    return unicodedata.normalize("NFKC", request.POST.get("username", "")).strip().lower()


def _username(group: str, request: HttpRequest) -> str:
    return "user:" + _tried(request)


def _device(request: HttpRequest) -> str | None:
    """The id of this browser's device cookie when it names the username tried, else None
    (none, forged, expired, or another person's)."""
    value = request.COOKIES.get(DEVICE_COOKIE)
    if not value:
        return None
    try:
        device = signing.loads(value, salt=_DEVICE_SALT, max_age=DEVICE_COOKIE_AGE)
    except signing.BadSignature:
        return None
    if not isinstance(device, dict) or device.get("user") != _tried(request) or not _tried(request):
        return None
    return str(device.get("device"))


def _limits(request: HttpRequest) -> list[tuple[str, object, str]]:
    device = _device(request)
    if device is not None:
        return [("login.device", lambda group, request: "device:" + device, settings.QORVEN_LOGIN_FAILURES_PER_USER)]
    return [("login.user", _username, settings.QORVEN_LOGIN_FAILURES_PER_USER),
            ("login.address", "ip", settings.QORVEN_LOGIN_FAILURES_PER_ADDRESS)]


def _wait(request: HttpRequest, limits: list[tuple[str, object, str]]) -> float | None:
    """Seconds until sign-in is open again for this request, or None when it is."""
    waits = []
    for group, key, rate in limits:
        usage = get_usage(request, group=group, key=key, rate=rate, method="POST", increment=False)
        if usage is not None and usage["count"] >= usage["limit"]:
            waits.append(usage["time_left"])
    return max(waits) if waits else None


def _count_failure(request: HttpRequest, limits: list[tuple[str, object, str]]) -> None:
    for group, key, rate in limits:
        get_usage(request, group=group, key=key, rate=rate, method="POST", increment=True)


def _remember_device(request: HttpRequest, response: HttpResponse) -> None:
    """Give the browser that just signed in a device cookie naming who it signed in as."""
    value = signing.dumps({"user": request.user.get_username().strip().lower(), "device": secrets.token_urlsafe(16)},
                          salt=_DEVICE_SALT)
    response.set_cookie(DEVICE_COOKIE, value, max_age=DEVICE_COOKIE_AGE, path=settings.SESSION_COOKIE_PATH,
                        domain=settings.SESSION_COOKIE_DOMAIN, httponly=True, samesite="Lax",
                        secure=settings.SESSION_COOKIE_SECURE or request.is_secure())


def login_throttled(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap a Django login view: refuse while throttled, count each failed POST, give a
    browser that signs in its device cookie."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if request.method != "POST":
            return view(request, *args, **kwargs)
        limits = _limits(request)
        wait = _wait(request, limits)
        if wait is not None:
            minutes = max(1, math.ceil(wait / 60))
            response = TemplateResponse(request, "registration/throttled.html", {"minutes": minutes}, status=429)
            response["Retry-After"] = str(max(1, int(wait)))
            return response
        signed_in_before = request.user.is_authenticated
        response = view(request, *args, **kwargs)
        if response.status_code == 200:  # the form came back: the sign-in failed
            _count_failure(request, limits)
        elif not signed_in_before and request.user.is_authenticated:  # signed in just now
            _remember_device(request, response)
        return response

    return wrapper
