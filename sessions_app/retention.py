"""Deleting conversations: old images and archived sessions past their retention, a
heartbeat's finished runs, and whole scopes (`qorven clear-memory`). Deleted messages
leave the history search index words and all (qorven.runtime.sqlite_erase)."""
from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction

from qorven.runtime.sqlite_erase import SettleOnOwnerDelete, fulltext_settle
from tenancy.models import Qor, Tenant

from .migrations._trigger import SEARCH_TABLE
from .models import Image, Message, Session


def image_prune(*, tenant: Tenant, older_than: datetime | None = None) -> int:
    """Delete the tenant's images created before `older_than` (all of them when None).
    Returns how many were deleted."""
    images = Image.objects.filter(tenant=tenant)
    if older_than is not None:
        images = images.filter(created_at__lt=older_than)
    _, per_model = images.delete()
    return per_model.get(Image._meta.label, 0)


PRUNE_BATCH = 100  # sessions deleted per statement batch: a long backlog is worked off in steps


def sessions_prune(*, tenant: Tenant, ended_before: datetime) -> dict[str, int]:
    """Delete the tenant's archived sessions that ended before `ended_before`, with their
    messages, attachments and deliveries (memories made from them stay, unlinked).
    Active sessions are never touched. Returns what went, by kind."""
    counts = {"sessions": 0, "messages": 0, "images": 0}
    while True:
        batch = list(Session.objects.filter(tenant=tenant, state=Session.State.ARCHIVED, ended_at__lt=ended_before)
                     .values_list("pk", flat=True)[:PRUNE_BATCH])
        if not batch:
            if counts["messages"]:
                fulltext_settle(SEARCH_TABLE)
            return counts
        _, per_model = Session.objects.filter(tenant=tenant, pk__in=batch).delete()
        counts["sessions"] += per_model.get(Session._meta.label, 0)
        counts["messages"] += per_model.get(Message._meta.label, 0)
        counts["images"] += per_model.get(Image._meta.label, 0)


def cron_sessions_delete(*, tenant: Tenant, session_ids: list[int]) -> int:
    """Delete the tenant's finished cron sessions among `session_ids` (heartbeat runs past
    their retention) with their messages. Any other session is left alone. Returns how
    many went."""
    if not session_ids:
        return 0
    _, per_model = Session.objects.filter(
        tenant=tenant, pk__in=session_ids, kind=Session.Kind.CRON, state=Session.State.ARCHIVED
    ).delete()
    if per_model.get(Message._meta.label, 0):
        fulltext_settle(SEARCH_TABLE)
    return per_model.get(Session._meta.label, 0)


@transaction.atomic
def conversations_delete(
    *, tenant: Tenant | None = None, qor: Qor | None = None, user: User | None = None
) -> dict[str, int]:
    """Delete the sessions of a scope (no filter = all) with their messages and images
    (for a whole tenant, its unattached images too). Returns what went, by kind."""
    from .selectors import _scoped_sessions

    images = 0
    if qor is None and user is None:
        unattached = Image.objects.filter(message__isnull=True)
        if tenant is not None:
            unattached = unattached.filter(tenant=tenant)
        images += unattached.delete()[1].get(Image._meta.label, 0)
    _, per_model = _scoped_sessions(tenant, qor, user).delete()
    if per_model.get(Message._meta.label, 0):
        fulltext_settle(SEARCH_TABLE)
    return {
        "sessions": per_model.get(Session._meta.label, 0),
        "messages": per_model.get(Message._meta.label, 0),
        "images": images + per_model.get(Image._meta.label, 0),
    }


# A person, workspace or Qor deleted takes their conversations by cascade (sessions_app.apps).
search_index_settle_receiver = SettleOnOwnerDelete(SEARCH_TABLE, "sessions_app.settle_search")
