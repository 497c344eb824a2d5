"""The JSON API: a user's canonical timeline with one Qor, posting to it (channel web, or
tui for a terminal client), stopping a reply being written, and what the Qor remembers
about them."""
from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.dateparse import parse_datetime
from django.views.decorators.csrf import csrf_exempt

from qorven.agent.gateway import inbound_accept
from qorven.runtime.dated_everywhere import dated_everywhere
from qorven.runtime.storable_text import storable
from sessions_app.channel_kinds import Channel
from sessions_app.models import Session
from sessions_app.qor_chat import qor_chat_get
from sessions_app.selectors import StoredMessage, messages_read
from sessions_app.services.resolve import session_resolve
from tenancy.access import surface_trust
from tenancy.errors import NotFound
from tenancy.selectors import qor_get
from tenancy.switches import channel_enabled

from .api_auth import bearer_required, json_error, json_methods, stop_unavailable
from .chat import ChatOwner, chat_stop, surface_session, with_deliveries
from .json_body import QUERY_INT_MAX, BodyRefused, ParamRefused, body_too_large, json_body, query_int

MAX_CONTENT = 100_000
DEFAULT_PAGE = 50  # messages a timeline read gives without a limit (at most QORVEN_API_PAGE_MAX)
MAX_IDEMPOTENCY_KEY = 255
CONTENT_EMPTY = '"content" must be a non-empty string'
CONTENT_TOO_LONG = f'"content" is longer than {MAX_CONTENT} characters'

# The surfaces an API client may be: a program of its own (web), or the terminal client.
POSTABLE_CHANNELS = frozenset({Channel.WEB, Channel.TUI})


def message_refusals() -> frozenset[str]:
    """The "error" of each 4xx a message's POST may meet for its content, for a client of
    ours to show as it says (channels_app.terminal_answers): the words of anything else in
    front of the server are not shown."""
    return frozenset({CONTENT_EMPTY, CONTENT_TOO_LONG, body_too_large(settings.QORVEN_MAX_BODY)})


def message_json(message: StoredMessage) -> dict[str, Any]:
    return {
        "seq": message.seq,
        "role": message.role,
        "content": message.content,
        "channel": message.channel,
        "sender_name": message.sender_name,
        "created_at": message.created_at.isoformat(),
        # pending, answered or failed for a message that expects an answer; else null
        "answer_state": message.answer_state,
    }


def session_json(session: Session | None) -> dict[str, Any] | None:
    if session is None:
        return None
    return {
        "id": session.pk,
        "kind": session.kind,
        "state": session.state,
        "started_at": session.started_at.isoformat(),
        "last_seq": session.last_seq,
    }


class BadRequest(Exception):
    pass


def _int_param(request: HttpRequest, name: str, *, minimum: int, maximum: int | None = None) -> int | None:
    try:
        return query_int(request, name, minimum=minimum, maximum=maximum)
    except ParamRefused as exc:
        raise BadRequest(str(exc)) from None


def _for_qor(view: Callable[[HttpRequest, Any], HttpResponse]) -> Callable[[HttpRequest, str], HttpResponse]:
    """A /v1/qors/<qor>/… view: the Qor of the token's tenant (404 for a missing or foreign
    one, alike), and bad input answered as a JSON 400 (or the body's own refusal: 413, …)."""

    @wraps(view)
    def resolved(request: HttpRequest, qor_slug: str) -> HttpResponse:
        try:
            qor = qor_get(tenant=request.tenant, slug=qor_slug)  # type: ignore[attr-defined]
        except NotFound:
            return _no_qor(qor_slug)
        return _answered(view, request, qor)

    return resolved


def _for_qor_chat(
    view: Callable[[HttpRequest, Any, Session | None], HttpResponse],
) -> Callable[[HttpRequest, str], HttpResponse]:
    """As _for_qor, for a view also given the caller's active canonical session with the
    Qor when it was read with it: in canonical mode the timeline's read and a message
    posted read both in one statement (sessions_app.qor_chat). None before the first
    message, and when not read (legacy mode, where the session is the surface's own)."""

    @wraps(view)
    def resolved(request: HttpRequest, qor_slug: str) -> HttpResponse:
        tenant = request.tenant  # type: ignore[attr-defined]
        chat = None
        try:
            if not settings.QORVEN_LEGACY_SESSIONS:
                qor, chat = qor_chat_get(tenant=tenant, slug=qor_slug, user=request.user)  # type: ignore[arg-type]
            else:
                qor = qor_get(tenant=tenant, slug=qor_slug)
        except NotFound:
            return _no_qor(qor_slug)
        return _answered(view, request, qor, chat)

    return resolved


def _no_qor(qor_slug: str) -> JsonResponse:
    return json_error(404, f"no Qor named {qor_slug!r}")


def _answered(view: Callable[..., HttpResponse], request: HttpRequest, *args: Any) -> HttpResponse:
    try:
        return view(request, *args)
    except BadRequest as exc:
        return json_error(400, str(exc))
    except BodyRefused as exc:
        return json_error(exc.status, str(exc))


def _json_object(request: HttpRequest, example: str) -> dict[str, Any]:
    """The request's JSON body, which must be an object (`example` shows one)."""
    if request.content_type != "application/json":
        raise BadRequest("send JSON with Content-Type: application/json")
    body = json_body(request)
    if not isinstance(body, dict):
        raise BadRequest(f"body must be a JSON object like {example}")
    return body


@csrf_exempt
@json_methods("GET", "POST")
@bearer_required
@_for_qor_chat
def qor_messages(request: HttpRequest, qor, chat: Session | None) -> HttpResponse:
    if request.method == "GET":
        return _timeline(request, qor, chat)
    return _post(request, qor, chat)


def _timeline(request: HttpRequest, qor, chat: Session | None) -> JsonResponse:
    channel = request.GET.get("channel") or None
    if channel is not None and channel not in Channel.values:
        raise BadRequest(f"unknown channel {channel!r}; one of: {', '.join(Channel.values)}")
    after_seq = _int_param(request, "after_seq", minimum=0)
    before_seq = _int_param(request, "before_seq", minimum=1)
    limit = _int_param(request, "limit", minimum=1, maximum=settings.QORVEN_API_PAGE_MAX)
    if limit is None:
        limit = min(DEFAULT_PAGE, settings.QORVEN_API_PAGE_MAX)
    if after_seq is not None and before_seq is not None:
        raise BadRequest("give after_seq or before_seq, not both")
    include = {part.strip() for part in request.GET.get("include", "").split(",") if part.strip()}
    if include - {"tools"}:
        raise BadRequest("include takes: tools (the Qor's tool calls and results, hidden otherwise)")
    # In legacy mode each surface has its own session: read the one this client writes to
    # (`surface`, else the channel it filters on when that is one it may post as).
    surface = request.GET.get("surface") or (channel if channel in POSTABLE_CHANNELS else Channel.WEB)
    if surface not in POSTABLE_CHANNELS:
        raise BadRequest(f"surface takes: {', '.join(sorted(POSTABLE_CHANNELS))}")
    # In canonical mode the chat came with the Qor (every surface reads it).
    session = chat if not settings.QORVEN_LEGACY_SESSIONS else surface_session(
        tenant=request.tenant, qor=qor, user=request.user, surface=surface)  # type: ignore[attr-defined]
    # Never an answer the person had written again (regenerate): a message here has
    # nothing to say it was replaced.
    messages = (
        messages_read(session=session, channel=channel, after_seq=after_seq, before_seq=before_seq, limit=limit,
                      without_working="tools" not in include, without_replaced=True)
        if session is not None
        else []
    )
    return JsonResponse({"session": session_json(session),
                         "messages": with_deliveries(messages, [message_json(m) for m in messages])})


def _post(request: HttpRequest, qor, chat: Session | None) -> JsonResponse:
    body = _json_object(request, '{"content": "hello"}')
    content = body.get("content")
    # Read as it would be stored (without NUL): "\u0000" alone is an empty message.
    content = storable(content) if isinstance(content, str) else None
    if content is None or not content.strip():
        raise BadRequest(CONTENT_EMPTY)
    if len(content) > MAX_CONTENT:
        raise BadRequest(CONTENT_TOO_LONG)
    channel = body.get("channel", Channel.WEB)
    if not isinstance(channel, str) or channel not in POSTABLE_CHANNELS:
        raise BadRequest(f'"channel" must be one of: {", ".join(sorted(POSTABLE_CHANNELS))}')
    key = request.headers.get("Idempotency-Key", "").strip()
    if len(key) > MAX_IDEMPOTENCY_KEY:
        raise BadRequest(f"Idempotency-Key is longer than {MAX_IDEMPOTENCY_KEY} characters")

    user = request.user
    if not channel_enabled(tenant=request.tenant, channel=channel):  # type: ignore[attr-defined]
        return json_error(403, f"the {channel} channel is switched off for this workspace")
    # The canonical session read with the Qor (web and tui both write to it), else resolved
    # as any message's is: created for a first message, a surface's own in legacy mode.
    session = chat if chat is not None else session_resolve(
        tenant=request.tenant, qor=qor, channel=channel, user=user)  # type: ignore[attr-defined]
    trust = surface_trust(role=request.member_role, surface=channel)  # type: ignore[attr-defined]
    result = inbound_accept(
        session=session,
        content=content,
        channel=channel,
        sender_name=user.get_full_name() or user.get_username(),
        user=user,
        trust=trust,
        external_scope=f"api:user:{user.pk}" if key else "",
        external_id=key,
    )
    return JsonResponse(
        {"session": session_json(result.message.session), "message": message_json(result.message),
         "created": result.created},
        status=201 if result.created else 200,
    )


@csrf_exempt
@json_methods("POST")
@bearer_required
@_for_qor
def qor_stop(request: HttpRequest, qor) -> HttpResponse:
    """POST `{"reply_to": seq}`: stop the reply to that message of the caller's chat where it
    is, as the chat page's Stop button does (`"surface": "tui"` for a terminal, which in
    legacy mode has a session of its own). 202 when its turn was asked to stop, 409 when no
    answer to it is being written, 503 when the request could not be passed on just now."""
    from qorven.agent.stop import StopUnavailable

    body = _json_object(request, '{"reply_to": 7}')
    reply_to = body.get("reply_to")
    if not isinstance(reply_to, int) or isinstance(reply_to, bool) or not 0 < reply_to <= QUERY_INT_MAX:
        raise BadRequest('"reply_to" must be the seq of your message')
    surface = body.get("surface", Channel.WEB)
    if not isinstance(surface, str) or surface not in POSTABLE_CHANNELS:  # a list or an object is unhashable
        raise BadRequest(f'"surface" must be one of: {", ".join(sorted(POSTABLE_CHANNELS))}')
    owner = ChatOwner(request.tenant, qor, request.user,  # type: ignore[attr-defined]
                      surface_trust(role=request.member_role, surface=surface), surface=surface)  # type: ignore[attr-defined]
    try:
        asked = chat_stop(owner=owner, reply_to=reply_to)
    except StopUnavailable:
        return stop_unavailable()
    if not asked:
        return json_error(409, "no answer to that message is being written")
    return JsonResponse({"stopping": reply_to}, status=202)


@csrf_exempt
@json_methods("POST")
@bearer_required
@_for_qor
def qor_voice_transcripts(request: HttpRequest, qor) -> HttpResponse:
    """POST a voice call's transcript: `{"call_id": "…", "turns": [{"speaker": "Priya",
    "text": "…", "at": "2026-12-02T09:30:00Z", "role": "user" | "assistant"}, …]}`. The
    call becomes a voice session of the token's user, condensed into their memories by a
    task. Posting the same call again (to any Qor) stores nothing (200)."""
    from memory_app.voice import MAX_TURN_CHARS, MAX_TURNS, SpokenTurn, voice_transcript_store

    body = _json_object(request, '{"call_id": "…", "turns": […]}')
    call_id, turns = body.get("call_id"), body.get("turns")
    # No NUL: no database stores one in text, and stripped it would name another call.
    if not isinstance(call_id, str) or not 0 < len(call_id.strip()) <= 200 or "\x00" in call_id:
        raise BadRequest('"call_id" must be a string of 1 to 200 characters, without NUL (the call\'s own id)')
    if not isinstance(turns, list) or not 0 < len(turns) <= MAX_TURNS:
        raise BadRequest(f'"turns" must be a list of 1 to {MAX_TURNS} speaker turns')
    spoken = [_spoken(i, t, MAX_TURN_CHARS, SpokenTurn) for i, t in enumerate(turns)]
    call = voice_transcript_store(tenant=request.tenant, qor=qor, user=request.user,  # type: ignore[attr-defined]
                                  call_id=call_id.strip(), turns=spoken)
    return JsonResponse({"session": session_json(call.session), "stored": call.stored,
                         "digest": "queued" if call.stored else "done before"}, status=201 if call.stored else 200)


@csrf_exempt
@json_methods("GET")
@bearer_required
@_for_qor
def qor_memories(request: HttpRequest, qor) -> HttpResponse:
    """GET: what the Qor remembers about the caller, newest first (`?before=<id>` for the
    page after the one that ended with that memory, `?limit=`, at most 100)."""
    from memory_app.person_memories import PAGE, PAGE_MAX, memories_listed, memory_page_json

    before = _int_param(request, "before", minimum=1, maximum=QUERY_INT_MAX)
    limit = _int_param(request, "limit", minimum=1, maximum=PAGE_MAX) or PAGE
    page = memories_listed(tenant=request.tenant, qor=qor, user=request.user,  # type: ignore[attr-defined]
                           before_id=before, limit=limit)
    return JsonResponse(memory_page_json(page))


@csrf_exempt
@json_methods("DELETE")
@bearer_required
def qor_memory_forget(request: HttpRequest, qor_slug: str, memory_id: int) -> HttpResponse:
    """DELETE: the Qor forgets that memory of the caller's (404 for one not theirs)."""
    from memory_app.person_memories import memory_forget

    @_for_qor
    def forget(request: HttpRequest, qor) -> HttpResponse:
        try:
            memory_forget(tenant=request.tenant, qor=qor, user=request.user,  # type: ignore[attr-defined]
                          memory_id=memory_id)
        except NotFound:
            return json_error(404, f"you have no memory {memory_id}")
        return JsonResponse({"forgotten": memory_id})

    return forget(request, qor_slug)


def _spoken(i: int, turn: Any, limit: int, kind: Any) -> Any:
    if not isinstance(turn, dict):
        raise BadRequest(f"turn {i} must be an object with speaker and text")
    speaker, text, at, role = turn.get("speaker", ""), turn.get("text"), turn.get("at"), turn.get("role", "user")
    text = storable(text) if isinstance(text, str) else text
    if not isinstance(text, str) or not text.strip() or len(text) > limit:
        raise BadRequest(f'turn {i}: "text" must be a non-empty string of at most {limit} characters')
    if not isinstance(speaker, str) or len(speaker) > 200:
        raise BadRequest(f'turn {i}: "speaker" must be a string of at most 200 characters')
    if role not in ("user", "assistant"):
        raise BadRequest(f'turn {i}: "role" is "user" (a person) or "assistant" (the Qor)')
    when = None
    if at is not None:
        when = parse_datetime(at) if isinstance(at, str) else None
        if when is None or when.utcoffset() is None:
            raise BadRequest(f'turn {i}: "at" must be an ISO 8601 time with its offset, e.g. 2026-12-02T09:30:00Z')
        if not dated_everywhere(when):  # stored in UTC, shown in the person's own timezone
            raise BadRequest(f'turn {i}: "at" is out of range')
    return kind(speaker=speaker.strip(), text=text.strip(), at=when, qor=role == "assistant")
