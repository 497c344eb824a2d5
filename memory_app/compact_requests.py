"""Pending `/compact`s, recorded so a worker killed mid-summary loses none of them.

The command (or the new_topic tool) records the request with its task; the task removes
it when it has an outcome the person was told (compacted, nothing to compact, failed) or
when the session is no longer active (compacted already: the broker delivering the task
again does nothing). The sweeper queues the task again for a request left behind once
nothing holds the session (the lease the command took ran out), at most COMPACT_TRIES
times; after that the request ends failed, said in the chat. A request of a workspace the
host suspended waits, untried and uncounted, until it is resumed.
"""
from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from sessions_app.errors import SessionClosed
from sessions_app.models import Message, Session
from sessions_app.services.append import message_append

from .models import CompactRequest

COMPACT_TRIES = 3
# A request younger than this is still in the hands of the task queued for it.
COMPACT_GRACE = timedelta(seconds=30)
GAVE_UP_REASON = "it was interrupted too many times"


def compact_request_record(*, tenant_id: int, session_id: int, channel: str) -> None:
    """Record a /compact of the session asked on `channel` (one per session: asking again
    while one is pending asks for the same thing)."""
    CompactRequest.objects.update_or_create(session_id=session_id,
                                            defaults={"tenant_id": tenant_id, "channel": channel})


def compact_request_pending(*, tenant_id: int, session_id: int) -> bool:
    return CompactRequest.objects.filter(tenant_id=tenant_id, session_id=session_id).exists()


def compact_request_done(*, tenant_id: int, session_id: int) -> None:
    CompactRequest.objects.filter(tenant_id=tenant_id, session_id=session_id).delete()


def compact_requests_recover(*, restart: bool = False, limit: int = 100) -> list[tuple[int, int, str]]:
    """For the sweeper: the /compacts to queue again, as (tenant, session, channel): left
    COMPACT_GRACE (none after `restart`) with nothing holding their session. Those of a
    session no longer active are dropped (it was compacted, or cleared); one queued again
    COMPACT_TRIES times already ends failed, with the notice. Those of a suspended
    workspace are left for after resume (the task would only put them back)."""
    from .tasks import FAILED_NOTICE

    now = timezone.now()
    left = CompactRequest.objects.filter(updated_at__lte=now - (timedelta(0) if restart else COMPACT_GRACE))
    # Read first: a sweep that finds nothing writes nothing (SQLite has one writer).
    ended = list(left.exclude(session__state=Session.State.ACTIVE).values_list("pk", flat=True)[:limit])
    if ended:
        CompactRequest.objects.filter(pk__in=ended).delete()
    free = left.filter(session__state=Session.State.ACTIVE, session__tenant__suspended_at__isnull=True).filter(
        Q(session__turn_lease_until__isnull=True) | Q(session__turn_lease_until__lt=now)
    ).select_related("session").order_by("pk")[:limit]
    queue = []
    for request in free:
        if request.tries >= COMPACT_TRIES:
            with transaction.atomic():
                if CompactRequest.objects.filter(pk=request.pk, tries=request.tries).delete()[0]:
                    try:
                        message_append(session=request.session, role=Message.Role.SYSTEM,
                                       content=FAILED_NOTICE.format(reason=GAVE_UP_REASON), channel=request.channel,
                                       metadata={"notice": "compact_failed"})
                    except SessionClosed:
                        pass
            continue
        if CompactRequest.objects.filter(pk=request.pk, tries=request.tries).update(
            tries=F("tries") + 1, updated_at=now
        ):
            queue.append((request.tenant_id, request.session_id, request.channel))
    return queue
