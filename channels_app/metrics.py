"""`/metrics` for Prometheus: this process's own metrics (qorven.runtime.metrics) and the
counts that live in the database, read at each scrape so they are right whichever
process did the work — inbound events and deliveries per channel and state, messages
waiting for or failing their answer, tokens per role, tasks queued.

Access: with QORVEN_METRICS_TOKEN set, only `Authorization: Bearer <token>`; without it,
only clients at QORVEN_METRICS_ALLOW (loopback by default). Behind a proxy on the same
machine every client looks local: set the token there.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from qorven.runtime.metrics import registry, scrape_refused
from sessions_app.models import Message
from tenancy.models import Usage

from .models import InboundEvent, OutboundDelivery


class DatabaseCollector(Collector):
    def describe(self) -> list[Any]:
        return []  # registering must not query: the URLconf imports this module before any request

    def collect(self) -> Iterator[Any]:
        inbound = GaugeMetricFamily("qorven_inbound_events", "Inbound platform messages stored, by channel and state.",
                                    labels=["channel", "state"])
        for row in InboundEvent.objects.values("binding__kind", "state").annotate(n=Count("pk")).order_by():
            inbound.add_metric([row["binding__kind"], row["state"]], row["n"])
        yield inbound
        deliveries = GaugeMetricFamily("qorven_deliveries", "Reply parts to platforms, by channel and state.",
                                       labels=["channel", "state"])
        for row in OutboundDelivery.objects.values("binding__kind", "state").annotate(n=Count("pk")).order_by():
            deliveries.add_metric([row["binding__kind"], row["state"]], row["n"])
        yield deliveries
        answers = GaugeMetricFamily("qorven_messages_unanswered",
                                    "User messages waiting for their answer (pending) or given up on (failed).",
                                    labels=["state"])
        counts = dict(Message.objects.filter(answer_state__in=[Message.Answer.PENDING, Message.Answer.FAILED])
                      .values_list("answer_state").annotate(n=Count("pk")).order_by().values_list("answer_state", "n"))
        for state in (Message.Answer.PENDING, Message.Answer.FAILED):
            answers.add_metric([state], counts.get(state, 0))
        yield answers
        tokens = CounterMetricFamily("qorven_usage_tokens", "Model tokens recorded, by role and kind.",
                                     labels=["role", "kind"])
        for row in Usage.objects.values("role").annotate(p=Sum("prompt_tokens"), c=Sum("completion_tokens")).order_by():
            tokens.add_metric([row["role"], "prompt"], row["p"] or 0)
            tokens.add_metric([row["role"], "completion"], row["c"] or 0)
        yield tokens
        yield GaugeMetricFamily("qorven_task_queue_depth", "Tasks queued and not yet taken by a worker.",
                                value=_queue_depth())


def _queue_depth() -> int:
    from celery import current_app

    from qorven.runtime import transport
    from qorven.runtime.worker import broker_is_embedded

    if broker_is_embedded(current_app):
        return transport.queued()
    with current_app.connection_for_read() as connection:
        return sum(connection.default_channel.client.llen(queue.name) for queue in current_app.amqp.queues.values())


registry.register(DatabaseCollector())


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    refused = scrape_refused(authorization=request.headers.get("Authorization", ""),
                             address=request.META.get("REMOTE_ADDR", ""), meta=request.META)
    if refused is not None:
        return JsonResponse({"error": refused[1]}, status=refused[0])
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
