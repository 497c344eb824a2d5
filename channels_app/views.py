"""The unified chat page: `/chat/` and `/chat/<qor>/`, and the JSON it reads and posts
(session-authenticated, CSRF-protected). Live updates come over the WebSocket
(channels_app.consumers); this module renders and relays."""
from __future__ import annotations

import base64
import time
from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect, render
from django.urls import get_script_prefix, reverse
from django.utils.http import content_disposition_header

from sessions_app.channel_kinds import Channel
from tenancy.errors import NotFound
from tenancy.zones import person_zone_own

from .api_auth import method_refused, stop_unavailable
from .chat import (
    PAGE,
    ChannelOff,
    ChatRead,
    chat_archive,
    chat_archived_get,
    chat_channels,
    chat_events,
    chat_image,
    chat_owner,
    chat_owner_read,
    chat_qors,
    chat_regenerate,
    chat_search,
    chat_send,
    chat_session,
    chat_stop,
)
from .json_body import QUERY_INT_MAX, BodyRefused, ParamRefused, json_body, query_int
from .live_events import message_event
from .uploads import UploadedImage, UploadRefused, images_read

# Badge labels for the chat family, in the order the filter lists them.
CHANNEL_LABELS = {c: c.label for c in (Channel.WEB, Channel.TUI, Channel.TELEGRAM, Channel.WHATSAPP,
                                        Channel.SLACK_DM, Channel.DISCORD_DM, Channel.WEBCHAT)}


@login_required
def chat_index(request: HttpRequest) -> HttpResponse:
    qors = chat_qors(user=request.user)
    if not qors:
        return render(request, "chat/no_chat.html", status=404)
    first = qors[0]
    return redirect(_page_url(first, several_tenants=_several_tenants(qors)))


@login_required
def chat_page(request: HttpRequest, qor_slug: str) -> HttpResponse:
    qors = chat_qors(user=request.user)
    tenant_slug = request.GET.get("tenant") or next((q.tenant.slug for q in qors if q.slug == qor_slug), "")
    try:
        owner = chat_owner(user=request.user, tenant_slug=tenant_slug, qor_slug=qor_slug)
    except NotFound:
        raise Http404("no such chat") from None
    several = _several_tenants(qors)
    heard_from = chat_channels(owner=owner)  # a filter chip only for a channel that can speak here
    zone_own, zone_workspace = person_zone_own(tenant=owner.tenant, user_id=owner.user.pk), owner.tenant.timezone or "UTC"
    config = {
        "tenant": owner.tenant.slug,
        "qor": owner.qor.slug,
        "qorName": owner.qor.name,
        "userName": owner.sender_name,
        "socket": f"{get_script_prefix()}ws/chat/{owner.tenant.slug}/{owner.qor.slug}/",
        "messages": reverse("chat-messages", args=[owner.tenant.slug, owner.qor.slug]),
        "channel": Channel.WEB,
        "labels": {str(k): v for k, v in CHANNEL_LABELS.items()},
        "pageSize": PAGE,
        "signIn": reverse("login"),
        "stop": reverse("chat-stop", args=[owner.tenant.slug, owner.qor.slug]),
        "conversations": reverse("chat-conversations", args=[owner.tenant.slug, owner.qor.slug]),
        "regenerate": reverse("chat-regenerate", args=[owner.tenant.slug, owner.qor.slug]),
        "search": reverse("chat-search", args=[owner.tenant.slug, owner.qor.slug]),
        "memories": reverse("chat-memories", args=[owner.tenant.slug, owner.qor.slug]),
        # The person's own timezone ("" = the workspace's), which the dates the Qor writes follow.
        "timezone": reverse("chat-timezone", args=[owner.tenant.slug, owner.qor.slug]),
        "zoneOwn": zone_own,
        "zoneWorkspace": zone_workspace,
        "images": f"{get_script_prefix()}chat/api/{owner.tenant.slug}/{owner.qor.slug}/images/",
        "maxUpload": settings.QORVEN_MAX_UPLOAD,
        # Messages stored before this are history: shown, never announced (server clock).
        "openedAt": int(time.time() * 1000),
        "csrfToken": get_token(request),  # the JSON posts' X-CSRFToken
    }
    return render(request, "chat/chat.html", {
        "owner": owner,
        "config": config,
        "channels": [(str(k), v) for k, v in CHANNEL_LABELS.items() if k in heard_from],
        "qors": [(q, _page_url(q, several_tenants=several), q.pk == owner.qor.pk) for q in qors],
        "several_tenants": several,
        "zone": zone_label(own=zone_own, workspace=zone_workspace),
    })


def zone_label(*, own: str, workspace: str) -> dict[str, str]:
    """The header's "Your timezone" item: the place in a few letters ("Buenos Aires") and
    in full ("Your timezone: UTC (the workspace's)"), as chat-timezone.js writes it too."""
    zone = own or workspace
    return {"short": zone.rsplit("/", 1)[-1].replace("_", " "),
            "full": f"Your timezone: {zone}" + ("" if own else " (the workspace's)")}


def member_json_view(
    *methods: str, with_chat: bool = False
) -> Callable[[Callable[..., JsonResponse]], Callable[..., JsonResponse]]:
    """A JSON endpoint of a member's chat: `view(request, owner)`, after the method (when
    `methods` are given), the sign-in and the chat (ChatOwner) are checked — each refusal
    in JSON, a chat of another tenant answered like a missing one. `with_chat`:
    `view(request, owner, read)`, the person's chat read with the Qor (chat_owner_read)."""
    def wrap(view: Callable[..., JsonResponse]) -> Callable[..., JsonResponse]:
        @wraps(view)
        def endpoint(request: HttpRequest, tenant_slug: str, qor_slug: str) -> JsonResponse:
            refused = method_refused(request, methods) if methods else None
            if refused is not None:
                return refused
            if not request.user.is_authenticated:
                return JsonResponse({"error": "sign in first"}, status=401)
            try:
                if with_chat:
                    owner, read = chat_owner_read(user=request.user, tenant_slug=tenant_slug, qor_slug=qor_slug)
                else:
                    owner, read = chat_owner(user=request.user, tenant_slug=tenant_slug, qor_slug=qor_slug), None
            except NotFound:
                return JsonResponse({"error": "no such chat"}, status=404)
            return view(request, owner, read) if with_chat else view(request, owner)
        return endpoint
    return wrap


@member_json_view("GET")
def chat_conversations(request: HttpRequest, owner) -> JsonResponse:
    """The person's earlier conversations with this Qor, newest first; read one with
    `messages?session=<id>`."""
    return JsonResponse({"conversations": chat_archive(owner=owner)})


def image_response(image) -> HttpResponse:
    """An attached image's bytes, for an `<img>` of the page or the webchat (shared)."""
    if image is None:
        return JsonResponse({"error": "no such image (it may no longer be kept)"}, status=404)
    response = HttpResponse(base64.b64decode(image.data), content_type=image.mime_type)
    if not image.mime_type.startswith(("image/", "audio/")):  # a PDF or text file: downloaded, never shown here
        response["Content-Disposition"] = content_disposition_header(True, image.name or "file")
    response["Cache-Control"] = "private, max-age=86400"
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response


def chat_image_view(request: HttpRequest, tenant_slug: str, qor_slug: str, session_id: int, seq: int,
                    index: int) -> HttpResponse:
    """GET: image `index` of message `seq` in one of the member's conversations with this Qor."""
    @member_json_view("GET")
    def read(request: HttpRequest, owner) -> HttpResponse:
        return image_response(chat_image(owner=owner, session_id=session_id, seq=seq, index=index))

    return read(request, tenant_slug, qor_slug)


@member_json_view("GET")
def chat_search_view(request: HttpRequest, owner) -> JsonResponse:
    """GET `?q=words`: the person's messages and the Qor's replies, in this conversation
    and the earlier ones, holding every word; newest first (at most 50)."""
    query = request.GET.get("q", "").strip()
    if not query:
        return JsonResponse({"error": 'say what to look for: "?q=words"'}, status=400)
    if len(query) > 200:
        return JsonResponse({"error": "search for at most 200 characters"}, status=400)
    return JsonResponse({"query": query, **chat_search(owner=owner, query=query)})


@member_json_view("GET")
def chat_memories_view(request: HttpRequest, owner) -> JsonResponse:
    """GET: what the Qor remembers about the person, newest first (`?before=<id>`: the next
    page); the chat page's Memories dialog."""
    from memory_app.person_memories import PAGE, memories_listed, memory_page_json

    try:
        before = query_int(request, "before", minimum=1)
    except ParamRefused as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    page = memories_listed(tenant=owner.tenant, qor=owner.qor, user=owner.user, before_id=before, limit=PAGE)
    return JsonResponse(memory_page_json(page))


def chat_memory_forget_view(request: HttpRequest, tenant_slug: str, qor_slug: str, memory_id: int) -> JsonResponse:
    """DELETE: the Qor forgets that memory of the person's (the dialog's Forget button)."""
    from memory_app.person_memories import memory_forget

    @member_json_view("DELETE")
    def forget(request: HttpRequest, owner) -> JsonResponse:
        try:
            memory_forget(tenant=owner.tenant, qor=owner.qor, user=owner.user, memory_id=memory_id)
        except NotFound:
            return JsonResponse({"error": "no such memory"}, status=404)
        return JsonResponse({"forgotten": memory_id})

    return forget(request, tenant_slug, qor_slug)


@member_json_view("POST")
def chat_stop_view(request: HttpRequest, owner) -> JsonResponse:
    """POST `{"reply_to": seq}`: stop the reply to that message where it is (the Stop
    button). 202 when a turn was asked to stop, 409 when no answer to it is on its way, 503
    when the request could not be passed on just now (the cache away)."""
    from qorven.agent.stop import StopUnavailable

    reply_to = _reply_to(request)
    if isinstance(reply_to, JsonResponse):
        return reply_to
    try:
        asked = chat_stop(owner=owner, reply_to=reply_to)
    except StopUnavailable:
        return stop_unavailable()
    if not asked:
        return JsonResponse({"error": "no answer to that message is being written"}, status=409)
    return JsonResponse({"stopping": reply_to}, status=202)


@member_json_view("POST")
def chat_regenerate_view(request: HttpRequest, owner) -> JsonResponse:
    """POST `{"reply_to": seq}`: answer that message again (the Regenerate button on the
    newest reply). 202 when a new answer is on its way, 409 when that message is not the
    newest answered one."""
    reply_to = _reply_to(request)
    if isinstance(reply_to, JsonResponse):
        return reply_to
    if not chat_regenerate(owner=owner, reply_to=reply_to):
        return JsonResponse({"error": "only the newest answered message can be answered again"}, status=409)
    return JsonResponse({"regenerating": reply_to}, status=202)


def _reply_to(request: HttpRequest) -> int | JsonResponse:
    """The `reply_to` seq of a JSON body, or the refusal to answer with."""
    try:
        body = json_body(request)
    except BodyRefused as exc:
        return JsonResponse({"error": str(exc)}, status=exc.status)
    reply_to = body.get("reply_to") if isinstance(body, dict) else None
    if not isinstance(reply_to, int) or isinstance(reply_to, bool) or not 0 < reply_to <= QUERY_INT_MAX:
        return JsonResponse({"error": '"reply_to" must be the seq of your message'}, status=400)
    return reply_to


@member_json_view("GET", "POST", with_chat=True)
def chat_messages(request: HttpRequest, owner, read: ChatRead | None) -> JsonResponse:
    """GET `?before_seq=` / `?after_seq=`: a page of the timeline before or after a
    message. POST `{"content": "…"}`: send on channel web (the CSRF token goes in the
    X-CSRFToken header)."""
    if request.method == "GET":
        return history_response(request, owner, archived=True, read=read)
    sent = sent_message(request)
    if isinstance(sent, JsonResponse):
        return sent
    content, client_id, images = sent
    try:
        result = chat_send(owner=owner, content=content, channel=Channel.WEB, idempotency_key=client_id,
                           images=images, read=read, opened_now=True)
    except NotFound:
        return JsonResponse({"error": "not found"}, status=404)
    except ChannelOff as exc:
        return JsonResponse({"error": str(exc)}, status=403)
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({"session_id": result.message.session_id, "message": message_event(result.message)},
                        status=201 if result.created else 200)


def sent_message(request: HttpRequest) -> tuple[str, str, list[UploadedImage]] | JsonResponse:
    """What a person sent (shared with the webchat): JSON `{"content", "client_id"}`, or a
    multipart form with those fields and up to four `image` files. The refusal otherwise."""
    if request.content_type == "multipart/form-data":
        try:
            images = images_read(request.FILES.getlist("image"))
        except UploadRefused as exc:
            return JsonResponse({"error": str(exc)}, status=exc.status)
        content, client_id = request.POST.get("content", ""), request.POST.get("client_id", "")
    else:
        try:
            body = json_body(request)
        except BodyRefused as exc:
            return JsonResponse({"error": str(exc)}, status=exc.status)
        content = body.get("content") if isinstance(body, dict) else None
        client_id, images = str(body.get("client_id") or "") if isinstance(body, dict) else "", []
    if not isinstance(content, str):
        return JsonResponse({"error": '"content" must be a string'}, status=400)
    if "\x00" in client_id:  # stored as the message's external id: no database takes a NUL in text
        return JsonResponse({"error": '"client_id" must not hold a NUL character'}, status=400)
    return content, client_id[:64], images


def history_response(
    request: HttpRequest, owner, *, archived: bool = False, read: ChatRead | None = None
) -> JsonResponse:
    """A page of a chat (shared with the webchat): `?session=<id>&before_seq=<n>`, the page
    before that message (the newest without it), or `&after_seq=<n>`, the page after it (a
    message found by the search, read on from there); `more` says whether the page was full
    (more may lie that way). A page counts the messages a page shows: the Qor's tool calls
    and results, which it never shows, are left out. With `archived`, `session` may also
    be one of the owner's earlier conversations. `read`: the chat as read with the Qor
    (chat_owner_read), not read again."""
    session = chat_session(owner=owner, read=read)
    try:
        before = query_int(request, "before_seq", minimum=0)
        after = query_int(request, "after_seq", minimum=0)
        wanted = query_int(request, "session", minimum=0)
    except ParamRefused as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    if before is not None and after is not None:
        return JsonResponse({"error": "give after_seq or before_seq, not both"}, status=400)
    if archived and wanted is not None and (session is None or wanted != session.pk):
        earlier = chat_archived_get(owner=owner, session_id=wanted)
        if earlier is None:  # another person's, or none: the same answer
            return JsonResponse({"error": "no such conversation"}, status=404)
        events = chat_events(session=earlier, after_seq=after, before_seq=before, limit=PAGE, without_working=True)
        return JsonResponse({"session_id": earlier.pk, "archived": True, "messages": events,
                             "more": len(events) == PAGE})
    if session is None or (wanted is not None and wanted != session.pk):
        return JsonResponse({"session_id": session.pk if session else None, "messages": []})
    events = chat_events(session=session, after_seq=after, before_seq=before, limit=PAGE, without_working=True)
    return JsonResponse({"session_id": session.pk, "messages": events, "more": len(events) == PAGE})


def _several_tenants(qors) -> bool:
    return len({q.tenant_id for q in qors}) > 1


def _page_url(qor, *, several_tenants: bool) -> str:
    url = reverse("chat-page", args=[qor.slug])
    return f"{url}?tenant={qor.tenant.slug}" if several_tenants else url

