"""`/healthz` and `/readyz` for load balancers and orchestrators.

`/healthz`: the process is up and serving (no I/O). `/readyz`: it can do its work now —
the database answers, and on the scale-out layout Redis (broker, channel layer, cache)
does too. Either answers JSON; a failed check says which part failed, never how (the
reason goes to the log: a URL in an error could carry a password).
"""
from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import connections
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from qorven.runtime.repeated_failure import RepeatedFailure

logger = logging.getLogger(__name__)
TIMEOUT = 2.0  # seconds a dependency has to answer
_redis: Any = None


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@never_cache
@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    checks = {"database": _check(_database)}
    if settings.REDIS_URL:
        checks["redis"] = _check(_redis_ping)
    ready = all(state == "ok" for state in checks.values())
    return JsonResponse({"status": "ok" if ready else "unavailable", "checks": checks}, status=200 if ready else 503)


def metrics(request: HttpRequest) -> Any:
    from channels_app.metrics import metrics_view  # its own access rule: a bearer token, else loopback

    return metrics_view(request)


# Answered whatever host they are asked as, over plain HTTP: probes and scrapers reach a
# process by its address, behind the TLS a load balancer terminates.
PROBES = {"/healthz": healthz, "/readyz": readyz, "/metrics": metrics}


class ProbesMiddleware:
    """Answers the probes and the metrics scrape before any other middleware: load
    balancers, orchestrators and Prometheus reach a process by its IP (not a host in
    DJANGO_ALLOWED_HOSTS: a 400, and an error logged, per probe) and over plain HTTP
    behind the TLS they terminate (not to be redirected to https). Their answers name no
    host and set nothing."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        probe = PROBES.get(request.path_info)
        return probe(request) if probe is not None else self.get_response(request)


def _check(probe: Any) -> str:
    name = probe.__name__.strip("_")
    # A load balancer probes every few seconds: a part away for long is one traceback, then
    # a line a minute, not a traceback a probe.
    failures = _failures.setdefault(name, RepeatedFailure(logger, f"readiness check {name} failed"))
    try:
        probe()
    except Exception as exc:
        failures.failed(type(exc).__name__)
        return "unavailable"
    failures.succeeded()
    return "ok"


_failures: dict[str, RepeatedFailure] = {}


def _database() -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def _redis_ping() -> None:
    global _redis
    if _redis is None:  # one client (and its connection pool) per process
        import redis

        _redis = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=TIMEOUT, socket_timeout=TIMEOUT)
    _redis.ping()
