"""`/v1/webhooks/<channel>`: verify, store, answer 200 at once; the rest runs as a task."""
from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from tenancy.switches import channel_enabled_cached

from .adapters import WebhookRejected, adapter_for
from .json_body import BodyRefused
from .receive import inbound_receive

logger = logging.getLogger(__name__)


@csrf_exempt
def webhook(request: HttpRequest, channel: str) -> HttpResponse:
    adapter = adapter_for(channel)
    if adapter is None:
        return JsonResponse({"error": f"no channel {channel!r}"}, status=404)
    if request.method == "GET":
        return adapter.handle_get(request)
    if request.method != "POST":
        return JsonResponse({"error": "POST only"}, status=405)
    try:
        binding = adapter.resolve(request)
        if not channel_enabled_cached(tenant=binding.tenant, channel=adapter.kind):
            return JsonResponse({"error": f"the {channel} channel is switched off"}, status=404)
        parsed = adapter.parse(request, binding)
    except WebhookRejected as exc:
        logger.info("%s webhook rejected: %s", channel, exc)
        return JsonResponse({"error": str(exc)}, status=exc.status)
    except BodyRefused as exc:
        logger.info("%s webhook body refused: %s", channel, exc)
        return JsonResponse({"error": str(exc)}, status=exc.status)
    for message in parsed.messages:
        inbound_receive(binding=binding, message=message)
    return parsed.response or JsonResponse({"ok": True})
