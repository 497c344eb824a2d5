"""Django's error report (the DEBUG page, and a report mailed or logged with it) shows the
settings and the request's environment with what names a secret hidden — and the user
name and password in a URL too, whatever the setting is called (qorven.runtime.error_reports)."""
from __future__ import annotations

import sys

from django.test import RequestFactory
from django.views.debug import technical_500_response


def _fail() -> None:
    raise RuntimeError("a failure")  # in a frame whose variables hold no password


def _report(**environ) -> str:
    request = RequestFactory().get("/chat/", **environ)
    try:
        _fail()
    except RuntimeError:
        kind, error, trace = sys.exc_info()
        return technical_500_response(request, kind, error, trace.tb_next).content.decode()


def test_the_debug_error_page_shows_no_password_of_a_proxy_or_a_service(settings):
    settings.DEBUG = True
    settings.QORVEN_OUTBOUND_PROXY = "http://proxyuser:pr0xy-Pass@proxy.internal:3128"
    settings.CELERY_BROKER_URL = "redis://:redis-Pass@redis.internal:6379/0"
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": "redis://:cache-Pass@redis.internal:6379/1"}}
    page = _report(HTTPS_PROXY="http://envuser:env-Pass@proxy.internal:3128")  # runserver's environment in META
    for password in ("pr0xy-Pass", "proxyuser", "redis-Pass", "cache-Pass", "env-Pass"):
        assert password not in page
    assert "http://***@proxy.internal:3128" in page  # which proxy it was, still
