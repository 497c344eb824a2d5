"""Reads of the conversation store. Every entry point takes the tenant (or the session
already obtained through one) explicitly; missing and foreign rows raise the same error."""
from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser

from qorven.models import Qor, Tenant

from .errors import SessionNotFound
from .models import Message, Session


def session_get(*, tenant: Tenant, session_id: int, user: AbstractBaseUser | None = None) -> Session:
    qs = Session.objects.filter(tenant=tenant, pk=session_id)
    if user is not None:
        qs = qs.filter(user=user)
    session = qs.select_related("qor").first()
    if session is None:
        raise SessionNotFound(session_id)
    return session


def session_for_task(*, tenant_id: int, session_id: int) -> Session | None:
    """The session a queued task names, or None when it (or its tenant) is gone: a task
    loaded by id must not fail on a row deleted since it was queued."""
    try:
        return session_get(tenant=Tenant.objects.get(pk=tenant_id), session_id=session_id)
    except (Tenant.DoesNotExist, SessionNotFound):
        return None


def canonical_session_find(*, tenant: Tenant, qor: Qor, user: AbstractBaseUser) -> Session | None:
    """The active canonical session of (tenant, qor, user), or None before the first message."""
    return Session.objects.filter(
        tenant=tenant, qor=qor, user=user, kind=Session.Kind.CANONICAL, state=Session.State.ACTIVE
    ).first()


def messages_read(
    *,
    session: Session,
    channel: str | None = None,
    after_seq: int | None = None,
    before_seq: int | None = None,
    limit: int = 50,
) -> list[Message]:
    """A surface's slice of a session, oldest first.

    With `after_seq`: the first `limit` messages after it (catch-up). Otherwise the newest
    `limit` messages (before `before_seq` when given, for scrolling back). With `channel`,
    only that channel's messages. Each form is one range scan of a (session[, channel], seq)
    index, so its cost does not depend on how long the session is.
    """
    if limit <= 0:
        return []
    qs = Message.objects.filter(session=session)
    if channel:
        qs = qs.filter(channel=channel)
    if after_seq is not None:
        return list(qs.filter(seq__gt=after_seq).order_by("seq")[:limit])
    if before_seq is not None:
        qs = qs.filter(seq__lt=before_seq)
    newest = list(qs.order_by("-seq")[:limit])
    newest.reverse()
    return newest


def context_read(
    *, session: Session, floor_seq: int, answering_seq: int, before_seq: int | None = None, limit: int = 64
) -> list[Message]:
    """The newest `limit` messages a model may see when answering message `answering_seq`,
    oldest first: after the compaction point `floor_seq`, before `before_seq`, without
    user messages that arrived later (they get their own turns), notices and commands.
    The filtering happens in the database, so a long backlog of skipped rows never
    reaches Python."""
    qs = Message.objects.filter(session=session, seq__gt=floor_seq)
    if before_seq is not None:
        qs = qs.filter(seq__lt=before_seq)
    qs = (
        qs.exclude(role=Message.Role.USER, seq__gt=answering_seq)
        .exclude(metadata__has_key="notice")
        .exclude(metadata__has_key="command")
    )
    rows = list(qs.order_by("-seq")[:limit])
    rows.reverse()
    return rows


def next_pending_user_message(*, session: Session) -> Message | None:
    """The oldest user message (not a slash command) not yet answered."""
    return (
        Message.objects.filter(session=session, role=Message.Role.USER, seq__gt=session.replied_through_seq)
        .exclude(metadata__has_key="command")  # commands are answered when they arrive
        .exclude(metadata__has_key="no_reply")  # group chatter the Qor was not addressed in
        .order_by("seq")
        .first()
    )


def session_successor(*, session: Session) -> Session | None:
    """The active session that took over from an archived one (after /clear, /compact or a
    compaction): the owner's canonical chat, or the same legacy thread. None for others."""
    if session.kind == Session.Kind.CANONICAL:
        qs = Session.objects.filter(
            tenant_id=session.tenant_id, qor_id=session.qor_id, user_id=session.user_id, kind=session.kind
        )
    elif session.kind == Session.Kind.LEGACY:
        qs = Session.objects.filter(
            tenant_id=session.tenant_id, qor_id=session.qor_id, kind=session.kind, channel=session.channel,
            external_thread_id=session.external_thread_id,
        )
    else:
        return None
    return qs.filter(state=Session.State.ACTIVE).exclude(pk=session.pk).select_related("qor").first()


def conversation_counts(
    *, tenant: Tenant | None = None, qor: Qor | None = None, user: AbstractBaseUser | None = None
) -> dict[str, int]:
    """How many sessions, messages and images a scope holds (no filter = all), as
    `conversations_delete` would count them."""
    from .models import Image

    sessions = _scoped_sessions(tenant, qor, user)
    images = Image.objects.filter(message__session__in=sessions)
    if qor is None and user is None:  # tenant-wide (or everything): unattached images too
        images = Image.objects.filter(tenant=tenant) if tenant is not None else Image.objects.all()
    return {
        "sessions": sessions.count(),
        "messages": Message.objects.filter(session__in=sessions).count(),
        "images": images.count(),
    }


def _scoped_sessions(tenant: Tenant | None, qor: Qor | None, user: AbstractBaseUser | None):
    qs = Session.objects.all()
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    if qor is not None:
        qs = qs.filter(qor=qor)
    if user is not None:
        qs = qs.filter(user=user)
    return qs
