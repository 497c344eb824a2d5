"""The process's own Prometheus metrics (prometheus-client): what happens in this process
as it happens — turns and their latency, model calls, live sockets. Counts that live in
the database (inbound events, deliveries, answer states, tokens) are read when `/metrics`
is scraped (channels_app.metrics), so they are right whichever process did the work.
"""
from __future__ import annotations

import hmac

from django.conf import settings
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

registry = CollectorRegistry(auto_describe=True)

turns = Counter("qorven_turns", "Messages a turn finished with, by outcome (answered, failed, retry).",
                ["outcome"], registry=registry)
turn_seconds = Histogram("qorven_turn_seconds", "From a message's turn starting to its outcome.",
                         buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120), registry=registry)
model_calls = Counter("qorven_model_calls", "Model calls, by role and outcome (ok or the error's kind).",
                      ["role", "outcome"], registry=registry)
model_call_seconds = Histogram("qorven_model_call_seconds", "Model call latency, by role.", ["role"],
                               buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120), registry=registry)
model_tokens = Counter("qorven_model_tokens", "Model tokens in this process, by role and kind (prompt, completion).",
                       ["role", "kind"], registry=registry)
live_sockets = Gauge("qorven_live_sockets", "WebSockets open on this process.", registry=registry,
                     multiprocess_mode="livesum")


# Headers a proxy adds to what it relays. A proxy on the same machine connects from
# loopback, so without them every visitor of https://<host>/metrics would be a local client.
RELAY_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP", "HTTP_X_FORWARDED_PROTO",
                 "HTTP_X_FORWARDED_HOST")


def scrape_refused(*, authorization: str, address: str, meta: dict) -> tuple[int, str] | None:
    """(status, why) when a scrape may not read the metrics, else None: with
    QORVEN_METRICS_TOKEN set, only `Authorization: Bearer <token>`; without it, only the
    addresses of QORVEN_METRICS_ALLOW, and only asked directly (`meta`, the request's
    headers as Django's META or a WSGI environ, shows no proxy relayed it). The web
    server's /metrics and a worker's metrics port alike."""
    token = settings.QORVEN_METRICS_TOKEN
    if token:
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            return 401, "metrics need Authorization: Bearer <QORVEN_METRICS_TOKEN>"
    elif address not in settings.QORVEN_METRICS_ALLOW or _relayed(meta):
        return 403, "metrics are served to QORVEN_METRICS_ALLOW only, asked directly; set QORVEN_METRICS_TOKEN"
    return None


def _relayed(meta: dict) -> bool:
    keys = list(RELAY_HEADERS)
    if settings.SECURE_PROXY_SSL_HEADER:
        keys.append(settings.SECURE_PROXY_SSL_HEADER[0])
    if settings.QORVEN_CLIENT_IP_HEADER:
        name = settings.QORVEN_CLIENT_IP_HEADER.upper().replace("-", "_")
        keys.append(name if name.startswith("HTTP_") else f"HTTP_{name}")
    return any(key in meta for key in keys)
