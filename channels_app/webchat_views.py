"""The webchat embed over HTTP: the loader script a tenant's site includes, the chat frame
it opens, and the frame's history and send endpoints.

The chat runs in an iframe served from Qorven, so it shares nothing with the host page:
no CORS, no third-party cookies (the visitor token travels in a header), and its
WebSocket has Qorven's own origin. Which sites may frame it is the binding's `origins`.
"""
from __future__ import annotations

import json
import time

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import get_script_prefix, reverse
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from qorven.runtime.security_headers import frame_ancestors_set
from qorven.runtime.storable_text import storable
from sessions_app.channel_kinds import Channel
from tenancy.errors import NotFound

from .api_auth import json_methods
from .chat import ChannelOff, chat_image, chat_send
from .live_events import message_event
from .views import CHANNEL_LABELS, history_response, image_response, sent_message
from .webchat import (
    WebchatRefused,
    webchat_binding,
    webchat_limit_message,
    webchat_limit_new_visitor,
    webchat_visitor,
)

VISITOR_HEADER = "X-Qorven-Visitor"
NEW_VISITOR_HEADER = "X-Qorven-New-Visitor"  # the frame's secret for the visitor it starts (webchat.py)


def _refused(exc: WebchatRefused) -> JsonResponse:
    response = JsonResponse({"error": str(exc)}, status=exc.status)
    if exc.retry_after is not None:
        response["Retry-After"] = str(exc.retry_after)
    return response


@require_GET
def loader(request: HttpRequest, key: str) -> HttpResponse:
    """`/webchat/<key>.js`: places the bubble and the (hidden) chat frame on the page."""
    try:
        webchat_binding(public_key=key)
    except WebchatRefused:
        return HttpResponse("/* no such webchat */", content_type="text/javascript", status=404)
    frame = request.build_absolute_uri(reverse("webchat-frame", args=[key]))
    response = render(request, "webchat/loader.js", {"frame_url": json.dumps(frame)},
                      content_type="text/javascript")
    response["Cache-Control"] = "public, max-age=300"
    return response


@xframe_options_exempt
@require_GET
def frame(request: HttpRequest, key: str) -> HttpResponse:
    try:
        binding = webchat_binding(public_key=key)
    except WebchatRefused as exc:
        return HttpResponse(str(exc), status=exc.status)
    config = {
        "key": key,
        "qorName": binding.qor.name,
        "socket": f"{get_script_prefix()}ws/webchat/{key}/",
        "messages": reverse("webchat-messages", args=[key]),
        "channel": Channel.WEBCHAT,
        "labels": {str(k): v for k, v in CHANNEL_LABELS.items()},
        "visitorHeader": VISITOR_HEADER,
        "newVisitorHeader": NEW_VISITOR_HEADER,
        "images": f"{get_script_prefix()}webchat/{key}/images/",
        "maxUpload": settings.QORVEN_MAX_UPLOAD,
        # Messages stored before this are history: shown, never announced (server clock).
        "openedAt": int(time.time() * 1000),
    }
    response = render(request, "webchat/frame.html", {"config": config, "qor": binding.qor})
    # The binding's sites may frame it (none named: any); the rest of its policy is every page's.
    frame_ancestors_set(response, str(binding.credentials.get("origins", "")).replace(",", " ").split())
    response["Referrer-Policy"] = "no-referrer"
    return response


@csrf_exempt  # no cookies: the visitor token is a header the host page cannot forge
@json_methods("GET", "POST")
def messages(request: HttpRequest, key: str) -> JsonResponse:
    token = request.headers.get(VISITOR_HEADER, "").strip()
    try:
        if request.method == "GET":
            visitor = webchat_visitor(public_key=key, token=token, create=False)
            if visitor is None:
                return JsonResponse({"session_id": None, "messages": []})
            return history_response(request, visitor.owner)
        sent = sent_message(request)
        if isinstance(sent, JsonResponse):
            return sent
        content, client_id, images = sent
        if not storable(content).strip() and not images:  # as chat_send reads it
            return JsonResponse({"error": "the message is empty"}, status=400)
        # Counted only when a visitor is made: a first message sent again finds its own.
        visitor = webchat_visitor(public_key=key, token=token, create=True,
                                  new_visitor=request.headers.get(NEW_VISITOR_HEADER, "").strip(),
                                  before_new=lambda: webchat_limit_new_visitor(request, public_key=key))
        webchat_limit_message(request, public_key=key, visitor=visitor)
    except WebchatRefused as exc:
        return _refused(exc)
    try:
        # The visitor, their membership and the webchat's switch were read just now.
        result = chat_send(owner=visitor.owner, content=content, channel=Channel.WEBCHAT,
                           idempotency_key=client_id, images=images, opened_now=True, switch_read=True)
    except NotFound:  # the signed visitor left the workspace since their token was checked
        return JsonResponse({"error": "the visitor token names no member of this workspace"}, status=403)
    except ChannelOff as exc:
        return JsonResponse({"error": str(exc)}, status=403)
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse(
        {"session_id": result.message.session_id, "message": message_event(result.message),
         "visitor": visitor.token if visitor.anonymous else None},
        status=201 if result.created else 200,
    )


@require_GET
def image(request: HttpRequest, key: str, session_id: int, seq: int, index: int) -> HttpResponse:
    """An image of the visitor's own chat (the visitor token in its header, as for messages)."""
    token = request.headers.get(VISITOR_HEADER, "").strip()
    try:
        visitor = webchat_visitor(public_key=key, token=token, create=False) if token else None
    except WebchatRefused as exc:
        return _refused(exc)
    if visitor is None:
        return JsonResponse({"error": "no such image"}, status=404)
    return image_response(chat_image(owner=visitor.owner, session_id=session_id, seq=seq, index=index))
