"""Who has something to collapse: (tenant, qor, user) with an active legacy chat session
(beside others, or alone)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db.models import Count, Q, QuerySet

from sessions_app.channel_kinds import CHAT_FAMILY
from sessions_app.models import Session
from tenancy.models import Tenant

OWNER_PAGE = 500

# Active sessions that belong to a user's chat: the canonical one and per-channel legacy
# ones of chat-family channels. Groups, email, sms, voice and cron are never merged.
MERGEABLE = Q(state=Session.State.ACTIVE, user__isnull=False) & (
    Q(kind=Session.Kind.CANONICAL) | Q(kind=Session.Kind.LEGACY, channel__in=sorted(CHAT_FAMILY))
)


@dataclass(frozen=True)
class ChatOwner:
    """One user's chat with one Qor: the unit that is collapsed, in one transaction."""

    tenant_id: int
    qor_id: int
    user_id: int


def _scoped(
    tenant: Tenant | None, qor_slug: str, user: User | None, *, suspended: bool = False
) -> QuerySet[Session]:
    # A workspace the host suspended is kept as it is until resumed: nothing merged, no
    # digest written, no turn queued. Its users are counted apart (collapse_suspended).
    qs = Session.objects.filter(MERGEABLE, tenant__suspended_at__isnull=not suspended)
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    if qor_slug:
        qs = qs.filter(qor__slug=qor_slug)
    if user is not None:
        qs = qs.filter(user=user)
    return qs


def _grouped(qs: QuerySet[Session]) -> QuerySet:
    # Anyone with a legacy chat session: several sessions (there is only ever one active
    # canonical chat, so the others are legacy ones), or a lone legacy session, which
    # becomes the user's canonical chat (its history is otherwise on no surface).
    owners = qs.values("tenant_id", "qor_id", "user_id").annotate(
        legacy=Count("id", filter=Q(kind=Session.Kind.LEGACY))).filter(legacy__gt=0)
    return owners.order_by("tenant_id", "qor_id", "user_id")


def collapse_owner_count(
    *, tenant: Tenant | None = None, qor_slug: str = "", user: User | None = None
) -> int:
    """How many (tenant, qor, user) have an active legacy chat-family session to collapse
    (a suspended workspace's are not counted: see collapse_suspended)."""
    return _grouped(_scoped(tenant, qor_slug, user)).count()


def collapse_suspended(
    *, tenant: Tenant | None = None, qor_slug: str = "", user: User | None = None
) -> dict[str, int]:
    """Per suspended workspace in scope (by slug, in slug order), how many (qor, user)
    have a legacy chat-family session that collapsing leaves untouched while it is so."""
    counts = Counter(r["tenant_id"] for r in _grouped(_scoped(tenant, qor_slug, user, suspended=True)))
    slugs = dict(Tenant.objects.filter(pk__in=counts).values_list("pk", "slug"))
    return {slugs[pk]: n for pk, n in sorted(counts.items(), key=lambda item: slugs[item[0]])}


def collapse_owners(
    *, tenant: Tenant | None = None, qor_slug: str = "", user: User | None = None
) -> Iterator[ChatOwner]:
    """Every (tenant, qor, user) with an active legacy chat-family session, in key order,
    in the workspaces being served.

    Paged by key rather than held on a cursor, so per-user commits can happen in between.
    """
    after: ChatOwner | None = None
    while True:
        qs = _scoped(tenant, qor_slug, user)
        if after is not None:
            t, q, u = after.tenant_id, after.qor_id, after.user_id
            qs = qs.filter(
                Q(tenant_id__gt=t)
                | Q(tenant_id=t, qor_id__gt=q)
                | Q(tenant_id=t, qor_id=q, user_id__gt=u)
            )
        page = [
            ChatOwner(r["tenant_id"], r["qor_id"], r["user_id"]) for r in _grouped(qs)[:OWNER_PAGE]
        ]
        yield from page
        if len(page) < OWNER_PAGE:
            return
        after = page[-1]


def owner_sessions(owner: ChatOwner) -> QuerySet[Session]:
    """The owner's mergeable sessions, in id order (the order they are locked in)."""
    return Session.objects.filter(
        MERGEABLE, tenant_id=owner.tenant_id, qor_id=owner.qor_id, user_id=owner.user_id
    ).order_by("id")
