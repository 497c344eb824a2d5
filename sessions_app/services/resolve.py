"""Which session a message belongs to: resolved on every message, created on first use.

The heart of "one conversation across every surface": chat-family channels share the one
active canonical session of (tenant, qor, user); email, sms, groups, voice and cron keep
their own session per external thread.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from qorven.runtime.prepared_read import PreparedRead
from tenancy.models import Qor, Tenant

from ..channel_kinds import CHAT_FAMILY, OWN_SESSION_CHANNELS
from ..models import Session
from ..thread_moves import group_thread_moved
from .lifecycle import session_archive


def session_resolve(
    *,
    tenant: Tenant,
    qor: Qor,
    channel: str,
    user: User | None = None,
    thread_id: str = "",
    sender_id: str = "",
    group: bool = False,
) -> Session:
    """Return the active session a message on `channel` belongs to, creating it on first use.

    - `group=True` (Telegram groups and their forum topics, Slack channels, Discord
      servers): one session per (channel, thread_id), for everyone in it.
    - email, sms, voice, cron: one session per (channel, thread_id) and person: another
      member naming the same thread (replying to it, or guessing its id) never lands in
      someone else's session, with their messages, memories and tools.
    - chat family: the canonical session of (tenant, qor, user); with
      QORVEN_LEGACY_SESSIONS=1, one legacy session per (channel, sender) instead.
    """
    if qor.tenant_id != tenant.pk:
        raise ValueError("qor does not belong to tenant")
    if group:
        if not thread_id:
            raise ValueError("a group message needs the group's thread_id")
        return _group_session(tenant, qor, channel, thread_id)
    if channel in OWN_SESSION_CHANNELS:
        if not thread_id:
            raise ValueError(f"a {channel} message needs a thread_id")
        return _thread_session(tenant, qor, Session.Kind(channel), channel, thread_id, user=user)
    if channel not in CHAT_FAMILY:
        raise ValueError(f"unknown channel {channel!r}")
    if settings.QORVEN_LEGACY_SESSIONS:
        key = sender_id or (f"user:{user.pk}" if user is not None else "")
        if not key:
            raise ValueError("a legacy session needs a sender id or a user")
        return _thread_session(tenant, qor, Session.Kind.LEGACY, channel, key, user=user)
    if user is None:
        raise ValueError("the canonical chat needs a user")
    return _canonical_session(tenant, qor, user)


def _canonical_session(tenant: Tenant, qor: Qor, user: User) -> Session:
    found = _active_canonical.first(tenant_id=tenant.pk, qor_id=qor.pk, user_id=user.pk)
    if found is not None:
        return found
    return _create_active(dict(tenant=tenant, qor=qor, user=user, kind=Session.Kind.CANONICAL,
                               state=Session.State.ACTIVE))


# Read for every message a person sends (compiled once: qorven.runtime.prepared_read).
_active_canonical: PreparedRead[Session] = PreparedRead(
    lambda tenant_id, qor_id, user_id: Session.objects.filter(
        tenant_id=tenant_id, qor_id=qor_id, user_id=user_id, kind=Session.Kind.CANONICAL, state=Session.State.ACTIVE
    ).order_by("pk")[:1],
    tenant_id=int, qor_id=int, user_id=int,
)


def _group_session(tenant: Tenant, qor: Qor, channel: str, thread_id: str) -> Session:
    lookup: dict[str, Any] = dict(tenant=tenant, qor=qor, kind=Session.Kind.GROUP, channel=channel,
                                  external_thread_id=thread_id, state=Session.State.ACTIVE)
    session = Session.objects.filter(**lookup).first()
    if session is not None:
        return session
    # Nothing is keyed by a chat's old id once the platform moved it: a message still naming
    # it (sent before the move, taken after) goes on in the conversation under the new one.
    moved = group_thread_moved(tenant=tenant, qor=qor, channel=channel, thread=thread_id)
    if moved is not None:
        return _get_or_create_active({**lookup, "external_thread_id": moved}, defaults={"user": None})
    return _create_active(lookup, defaults={"user": None})


def _thread_session(
    tenant: Tenant, qor: Qor, kind: str, channel: str, thread_id: str, *, user: User | None
) -> Session:
    lookup: dict[str, Any] = dict(
        tenant=tenant, qor=qor, kind=kind, channel=channel, external_thread_id=thread_id, state=Session.State.ACTIVE
    )
    if kind == Session.Kind.GROUP:  # shared
        return _get_or_create_active(lookup, defaults={"user": user})
    if kind == Session.Kind.LEGACY:  # keyed by its one sender already
        session = _get_or_create_active(lookup, defaults={"user": user})
        if user is None or session.user_id in (None, user.pk):
            return session
        # The sender's account speaks for someone else now (unlinked and paired again: a
        # number given to someone new). Its chat is the first person's — their words, and
        # turns run with their memories and tools — so it is closed, kept whole, and the
        # new person's starts empty.
        session_archive(session_id=session.pk)
        return _create_active(lookup, defaults={"user": user})
    return _get_or_create_active({**lookup, "user": user})


def _get_or_create_active(lookup: dict[str, Any], defaults: dict[str, Any] | None = None) -> Session:
    session = Session.objects.filter(**lookup).first()
    if session is not None:
        return session
    return _create_active(lookup, defaults)


def _create_active(lookup: dict[str, Any], defaults: dict[str, Any] | None = None) -> Session:
    """The active session of `lookup`, just looked for and not found: created now."""
    try:
        with transaction.atomic():
            return Session.objects.create(**lookup, **(defaults or {}))
    except IntegrityError:
        # Another request created it first; the partial unique index decided the winner.
        return Session.objects.get(**lookup)
