"""A person's canonical chat with a Qor, as the live surfaces (the chat page, its
WebSocket, the webchat embed, the terminal) read and write it.

Every entry point starts from a ChatOwner, which only `chat_owner` (a member of the
tenant) or the webchat visitor check makes; a Qor of another tenant, or a tenant the user
is not a member of, is the same NotFound.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User

from qorven.agent.gateway import inbound_accept
from qorven.runtime.storable_text import storable
from qorven.runtime.streams import stream_snapshot
from sessions_app.channel_kinds import CHAT_FAMILY
from sessions_app.leases import lease_held
from sessions_app.models import Session
from sessions_app.selectors import MessageRow, canonical_session_find, messages_read
from sessions_app.attachments import ImageBytes
from sessions_app.services.append import AppendResult
from sessions_app.services.resolve import session_resolve
from tenancy.errors import NotFound
from tenancy.access import surface_access
from tenancy.switches import channel_enabled
from tenancy.models import Qor, Tenant

from .delivery import PLATFORM_OF, failed_deliveries
from .live_events import message_event

class ChannelOff(ValueError):
    """The surface written on is switched off for the workspace (a plugin setting)."""


PAGE = 50  # messages per page of history
CATCH_UP_MAX = 500  # a client further behind than this starts again from the newest page
MAX_CONTENT = 100_000


@dataclass(frozen=True)
class ChatOwner:
    tenant: Tenant
    qor: Qor
    user: User
    trust: str
    # A member's trust is read again from their membership for every message they send;
    # an anonymous webchat visitor (no membership) keeps the public trust it was given.
    member: bool = True
    # The surface this owner writes on (web, tui, webchat): with QORVEN_LEGACY_SESSIONS it
    # is also the session read, since each surface then has its own.
    surface: str = "web"

    @property
    def sender_name(self) -> str:
        return self.user.get_full_name() or self.user.get_username()


@dataclass(frozen=True)
class ChatRead:
    """The owner's active canonical chat as read with its Qor (sessions_app.qor_chat):
    `session` is None before their first message, never an archived chat."""
    session: Session | None


def chat_owner(*, user: User, tenant_slug: str, qor_slug: str, surface: str = "web") -> ChatOwner:
    """The user's chat with that Qor on `surface` (web, tui), if they are a member of its
    tenant; a tenant they are not a member of is not found, like a missing one."""
    tenant, trust = _member_tenant(user=user, tenant_slug=tenant_slug, surface=surface)
    qor = Qor.objects.filter(tenant=tenant, slug=qor_slug).first()
    if qor is None:
        raise NotFound(f"no qor {qor_slug!r}")
    return ChatOwner(tenant, qor, user, trust, surface=surface)


def chat_owner_read(
    *, user: User, tenant_slug: str, qor_slug: str, surface: str = "web"
) -> tuple[ChatOwner, ChatRead | None]:
    """chat_owner for one request, with the person's chat read in the Qor's statement (in
    canonical mode: one statement for both, which were two). None in legacy mode, where
    the session is the surface's own and is read as before (chat_session, session_resolve).
    Not for an owner kept open (a socket, a terminal): the chat it read would go stale."""
    if settings.QORVEN_LEGACY_SESSIONS:
        return chat_owner(user=user, tenant_slug=tenant_slug, qor_slug=qor_slug, surface=surface), None
    from sessions_app.qor_chat import qor_chat_get

    tenant, trust = _member_tenant(user=user, tenant_slug=tenant_slug, surface=surface)
    qor, session = qor_chat_get(tenant=tenant, slug=qor_slug, user=user)  # NotFound as chat_owner's
    return ChatOwner(tenant, qor, user, trust, surface=surface), ChatRead(session)


def _member_tenant(*, user: User, tenant_slug: str, surface: str) -> tuple[Tenant, str]:
    """The tenant and the user's trust on `surface` in it, read with their membership (one
    statement: they were two); NotFound alike for a missing tenant and one they are not a
    member of."""
    from tenancy.access import surface_access_of_role
    from tenancy.selectors import tenant_role_get

    if not user.is_authenticated:
        raise NotFound("not signed in")
    tenant, role = tenant_role_get(slug=tenant_slug, user=user)
    trust = surface_access_of_role(user=user, role=role, surface=surface) if tenant is not None else None
    if tenant is None or trust is None:
        raise NotFound(f"no tenant {tenant_slug!r}")
    return tenant, trust


def chat_stop(*, owner: ChatOwner, reply_to: int) -> bool:
    """Ask the reply to message `reply_to` of the person's chat to stop where it is (the
    part written so far stays as the answer). False when no answer to it is on its way."""
    from qorven.agent.stop import turn_stop_request
    from sessions_app.selectors import awaiting_answer

    session = chat_session(owner=owner)
    if session is None or not awaiting_answer(session=session, seq=reply_to):
        return False
    turn_stop_request(session_id=session.pk, reply_to=reply_to)
    return True


def chat_regenerate(*, owner: ChatOwner, reply_to: int) -> bool:
    """Write the answer to message `reply_to` of the person's chat again (the newest
    message, answered). False when that message cannot be answered again."""
    from qorven.agent.gateway import reply_regenerate

    session = chat_session(owner=owner)
    return session is not None and reply_regenerate(session=session, reply_to=reply_to)


def chat_channels(*, owner: ChatOwner) -> set[str]:
    """The chat-family channels this chat can hear from: the web and the terminal, and
    each platform the Qor has an enabled binding on."""
    from sessions_app.channel_kinds import Channel

    from .models import ChannelBinding

    chat_channel_of = {kind: channel for channel, kind in PLATFORM_OF.items() if channel in CHAT_FAMILY}
    chat_channel_of["webchat"] = Channel.WEBCHAT
    kinds = ChannelBinding.objects.filter(tenant=owner.tenant, qor=owner.qor, enabled=True).values_list(
        "kind", flat=True).distinct()
    return {Channel.WEB, Channel.TUI} | {chat_channel_of[k] for k in kinds if k in chat_channel_of}


def chat_qors(*, user: User) -> list[Qor]:
    """Every Qor the user can chat with (in workspaces not suspended), default Qors of each
    tenant first."""
    return list(
        Qor.objects.select_related("tenant")
        .filter(tenant__memberships__user=user, tenant__suspended_at__isnull=True)
        .order_by("tenant__slug", "-is_default", "slug")
    )


def chat_page_address(*, qor: Qor, user: User) -> str:
    """The address of the person's chat page with `qor` (under QORVEN_PUBLIC_URL), naming
    its workspace when they are in several: the page opens the first one's otherwise."""
    from django.conf import settings

    address = f"{settings.QORVEN_PUBLIC_URL.rstrip('/')}/chat/{qor.slug}/"
    if len({q.tenant_id for q in chat_qors(user=user)}) > 1:
        address += f"?tenant={qor.tenant.slug}"
    return address


def chat_session(*, owner: ChatOwner, read: ChatRead | None = None) -> Session | None:
    """The active canonical session, or None before the first message; `read`: as it was
    read with the Qor (chat_owner_read), not read again. In legacy mode
    (QORVEN_LEGACY_SESSIONS) the surface's own session: the one its messages go to."""
    if read is not None:
        return read.session
    return surface_session(tenant=owner.tenant, qor=owner.qor, user=owner.user, surface=owner.surface)


def surface_session(*, tenant: Tenant, qor: Qor, user: User, surface: str) -> Session | None:
    """The session a member's messages on `surface` (web, tui, webchat) go to: their
    canonical chat, or in legacy mode that surface's own session; None before the first."""
    if not settings.QORVEN_LEGACY_SESSIONS:
        return canonical_session_find(tenant=tenant, qor=qor, user=user)
    # As sessions_app.services.resolve.session_resolve keys a member's legacy session.
    return Session.objects.filter(
        tenant=tenant, qor=qor, kind=Session.Kind.LEGACY, channel=surface,
        external_thread_id=f"user:{user.pk}", state=Session.State.ACTIVE,
    ).first()


def chat_stream(*, session: Session) -> dict[str, Any] | None:
    """The reply being written on the chat now (`{"reply_to", "text"}`, its text so far),
    or None. The text outlives a turn whose worker died mid-reply (the cache keeps it for
    minutes); it is being written only while a turn still holds the session's lease."""
    snapshot = stream_snapshot(session.pk)
    return snapshot if snapshot is not None and lease_held(session=session) else None


def chat_session_get(*, owner: ChatOwner, session_id: int) -> Session | None:
    """`session_id` if it is the owner's active canonical session (a chat that moved on)."""
    if settings.QORVEN_LEGACY_SESSIONS:
        legacy = chat_session(owner=owner)
        return legacy if legacy is not None and legacy.pk == session_id else None
    return Session.objects.filter(
        pk=session_id, tenant=owner.tenant, qor=owner.qor, user=owner.user,
        kind=Session.Kind.CANONICAL, state=Session.State.ACTIVE,
    ).first()


ARCHIVE_LIMIT = 100  # earlier conversations listed, newest first


def chat_archive(*, owner: ChatOwner) -> list[dict[str, Any]]:
    """The person's earlier conversations with this Qor (archived by /clear, a compaction
    or a rotation), newest first: when, how long, and how each began."""
    from django.db.models import OuterRef, Subquery

    from sessions_app.models import Message

    first_words = Message.objects.filter(session=OuterRef("pk"), role=Message.Role.USER).order_by("seq")
    sessions = (
        Session.objects.filter(tenant=owner.tenant, qor=owner.qor, user=owner.user, kind=Session.Kind.CANONICAL,
                               state=Session.State.ARCHIVED)
        .annotate(opening=Subquery(first_words.values("content")[:1]))
        .order_by("-started_at", "-pk")[:ARCHIVE_LIMIT]
    )
    return [{"session_id": s.pk, "started_at": s.started_at.isoformat(),
             "ended_at": s.ended_at.isoformat() if s.ended_at else None, "messages": s.last_seq,
             "opening": (s.opening or "")[:160]} for s in sessions]


SNIPPET = 180  # characters of a found message shown around the first word found


def chat_search(*, owner: ChatOwner, query: str) -> dict[str, Any]:
    """Search the person's whole history with this Qor (this conversation and the earlier
    ones): each hit with where it is and a snippet around the first word found."""
    from sessions_app.fulltext import message_terms
    from sessions_app.search import hit_snippet, message_search

    terms = message_terms(query)
    hits = message_search(tenant=owner.tenant, qor=owner.qor, user=owner.user, query=query)
    snippets = [hit_snippet(h.content, terms, width=SNIPPET) for h in hits]
    return {"terms": terms, "results": [{
        "session_id": h.session_id, "seq": h.seq, "role": h.role, "channel": h.channel,
        "created_at": h.created_at.isoformat(), "archived": not h.active, "snippet": snippet,
        "marks": _marks(snippet, terms),
    } for h, snippet in zip(hits, snippets)]}


def _marks(snippet: str, terms: list[str]) -> list[list[int]]:
    """Where the words found are in `snippet`, as [start, end] in the UTF-16 units a
    browser's strings count (an emoji is two), so the page marks exactly those."""
    from sessions_app.search import hit_spans

    def units(i: int) -> int:
        return len(snippet[:i].encode("utf-16-le")) // 2

    return [[units(start), units(end)] for start, end in hit_spans(snippet, terms)]


def chat_archived_get(*, owner: ChatOwner, session_id: int) -> Session | None:
    """`session_id` if it is one of the owner's earlier (archived) conversations with this Qor."""
    return Session.objects.filter(
        pk=session_id, tenant=owner.tenant, qor=owner.qor, user=owner.user,
        kind=Session.Kind.CANONICAL, state=Session.State.ARCHIVED,
    ).first()


def chat_image(*, owner: ChatOwner, session_id: int, seq: int, index: int):
    """An image the person (or the Qor) sent in one of their conversations with this Qor
    (the one going on, or an earlier one), or None."""
    from sessions_app.selectors import message_image

    session = chat_session_get(owner=owner, session_id=session_id) or chat_archived_get(
        owner=owner, session_id=session_id)
    return None if session is None else message_image(session=session, seq=seq, index=index)


def chat_events(*, session: Session, after_seq: int | None = None, before_seq: int | None = None,
                limit: int = PAGE, without_working: bool = False) -> list[dict]:
    """Messages as live events, oldest first: after `after_seq` (catch-up), or the newest
    page (before `before_seq` when scrolling back); `without_working`: not the Qor's tool
    calls and results nor the answers written again (regenerate), so `limit` counts
    messages a surface shows."""
    messages = messages_read(session=session, after_seq=after_seq, before_seq=before_seq, limit=limit,
                             without_working=without_working, without_replaced=without_working)
    return with_deliveries(messages, [message_event(m) for m in messages])


def with_deliveries(messages: list[MessageRow], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mark the replies that could not be delivered to their platform (one query for the
    page, only when it holds platform replies)."""
    sent = [m.id for m in messages if m.channel in PLATFORM_OF and m.role in ("assistant", "system")]
    failed = failed_deliveries(message_ids=sent)
    if failed:
        for message, event in zip(messages, events, strict=True):
            if message.id in failed:
                event["delivery"] = {"state": "failed", "platform": failed[message.id]}
    return events


def chat_send(
    *, owner: ChatOwner, content: str, channel: str, idempotency_key: str = "", images: Sequence[ImageBytes] = (),
    read: ChatRead | None = None, opened_now: bool = False, switch_read: bool = False,
) -> AppendResult:
    """The person wrote `content` on `channel` (web, tui, webchat), perhaps with `images`:
    store it in their canonical chat (the images in the same transaction) and queue the
    answer. `read`: the chat as read with the Qor (chat_owner_read); one rotated since
    (/clear in another tab) is followed to its successor as the message is stored
    (qorven.agent.gateway.inbound_accept), as one resolved here would be. `opened_now`:
    the owner was made for this request (a page's POST), its trust on its surface read
    from the membership just now: not read again for a message on that surface.
    `switch_read`: so was the surface's channel switch (the webchat's, as its binding was
    found: channels_app.webchat.webchat_binding)."""
    content = storable(content).strip("\n")  # as stored: NULs alone are an empty message
    if not content.strip() and not images:
        raise ValueError("the message is empty")
    if len(content) > MAX_CONTENT:
        raise ValueError(f"the message is longer than {MAX_CONTENT} characters")
    if not (switch_read and opened_now and channel == owner.surface) and not channel_enabled(
            tenant=owner.tenant, channel=channel):
        raise ChannelOff(f"the {channel} channel is switched off for this workspace")
    trust = owner.trust
    if owner.member and not (opened_now and channel == owner.surface):
        # A terminal stays open for hours: the membership decides each message.
        current = surface_access(tenant=owner.tenant, user=owner.user, surface=channel)
        if current is None:
            raise NotFound("not a member of this workspace any more")
        trust = current
    # The chat read with the Qor, else resolved: created for a first message.
    session = read.session if read is not None and read.session is not None else session_resolve(
        tenant=owner.tenant, qor=owner.qor, channel=channel, user=owner.user)
    return inbound_accept(
        session=session, content=content, channel=channel, sender_name=owner.sender_name, user=owner.user,
        trust=trust, external_scope=f"{channel}:user:{owner.user.pk}" if idempotency_key else "",
        external_id=idempotency_key[:255], images=images,
    )
