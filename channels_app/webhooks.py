"""`/v1/webhooks/<channel>`: verify, store, answer 200 at once; the rest runs as a task.

`webhook_prepare` is everything before storing — the adapter verifies the request,
resolves its binding, checks the channel switch and parses the messages — and is shared
by the two ways a webhook arrives: Django's view below (WSGI, the test client) and the
lean ASGI path `qorven serve` answers them on (channels_app.webhook_ingest), which stores
the messages of concurrent webhooks in one statement.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from tenancy.switches import channel_enabled_cached

from .adapters import WebhookRejected, adapter_for
from .adapters.base import Undelivered
from .api_auth import method_refused
from .inbound import InboundMessage
from .json_body import BodyRefused
from .models import ChannelBinding
from .receive import inbound_store
from .send_failures import deliveries_undelivered

logger = logging.getLogger(__name__)

OK = {"ok": True}  # the body of a webhook taken


@dataclass
class Prepared:
    """What a webhook request comes to: the answer, and the messages to store before it
    is given (none for a refusal, a challenge, or an event that carries no message)."""

    response: HttpResponse | None  # None: the usual {"ok": true} (made once by the lean path)
    binding: ChannelBinding | None = None
    messages: list[InboundMessage] = field(default_factory=list)
    undelivered: list[Undelivered] = field(default_factory=list)  # sent parts the platform reports failed


def undelivered_record(prepared: Prepared) -> None:
    """Record what the platform reports undelivered (rare: done in the request, so a
    failure to record it is an error answer and the platform reports it again)."""
    if prepared.undelivered and prepared.binding is not None:
        deliveries_undelivered(binding=prepared.binding, reports=prepared.undelivered)


def webhook_prepare(channel: str, request: HttpRequest) -> Prepared:
    """Verify and parse one webhook request; no platform I/O, no writes."""
    adapter = adapter_for(channel)
    if adapter is None:
        return Prepared(JsonResponse({"error": f"no channel {channel!r}"}, status=404))
    refused = method_refused(request, adapter.methods)
    if refused is not None:
        return Prepared(refused)
    if request.method == "GET":
        return Prepared(adapter.handle_get(request))
    try:
        binding = adapter.resolve(request)
        if not channel_enabled_cached(tenant=binding.tenant, channel=adapter.kind):
            return Prepared(JsonResponse({"error": f"the {channel} channel is switched off"}, status=404))
        parsed = adapter.parse(request, binding)
    except WebhookRejected as exc:
        logger.info("%s webhook rejected: %s", channel, exc.detail or exc)
        return Prepared(JsonResponse({"error": str(exc)}, status=exc.status))
    except BodyRefused as exc:
        logger.info("%s webhook body refused: %s", channel, exc)
        return Prepared(JsonResponse({"error": str(exc)}, status=exc.status))
    return Prepared(parsed.response, binding, list(parsed.messages), list(parsed.undelivered))


@csrf_exempt
def webhook(request: HttpRequest, channel: str) -> HttpResponse:
    prepared = webhook_prepare(channel, request)
    if prepared.messages:
        inbound_store(items=[(prepared.binding, message) for message in prepared.messages])
    undelivered_record(prepared)
    return prepared.response or JsonResponse(OK)
