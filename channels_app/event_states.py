"""An inbound event's state as its processing moves it: claimed, given back, failed, done.

Every statement names the event's tenant as well as its id, as the read that hands the
event to its task does (channels_app.receive.inbound_event): an id that is another
tenant's changes nothing. The tenant is one more condition on the row the primary key
finds, so each is still one UPDATE by primary key.
"""
from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from .models import InboundEvent


def event_claim(*, tenant_id: int, event_id: int, state: str, updated_at: datetime) -> bool:
    """Take the event for the calling task, if it is still as it was read (`state`,
    `updated_at`); False when another task took or finished it meanwhile."""
    return bool(InboundEvent.objects.filter(tenant_id=tenant_id, pk=event_id, state=state, updated_at=updated_at)
                .update(state=InboundEvent.State.PROCESSING, updated_at=timezone.now()))


def event_claim_give_back(*, tenant_id: int, event_id: int) -> None:
    """Put a claimed event back to pending, for the next task to take at once."""
    InboundEvent.objects.filter(tenant_id=tenant_id, pk=event_id, state=InboundEvent.State.PROCESSING).update(
        state=InboundEvent.State.PENDING, updated_at=timezone.now())


def event_fail(*, tenant_id: int, event_id: int, error: str) -> None:
    """Mark the event failed with `error` (the admin shows it)."""
    InboundEvent.objects.filter(tenant_id=tenant_id, pk=event_id).update(
        state=InboundEvent.State.FAILED, result="error", error=error[:2000], updated_at=timezone.now())


def event_finish(*, tenant_id: int, event_id: int, result: str) -> None:
    """Mark the event done with `result`, its payload emptied: the message lives in the
    conversation (or was never to be kept), and the event only recognises a retry of it."""
    InboundEvent.objects.filter(tenant_id=tenant_id, pk=event_id).update(
        state=InboundEvent.State.DONE, result=result, payload={}, updated_at=timezone.now())


def event_result(*, tenant_id: int, event_id: int) -> str:
    """The finished event's result as stored; "missing" when it is gone (its binding
    deleted meanwhile), as the task answers an event it cannot find."""
    result = InboundEvent.objects.filter(tenant_id=tenant_id, pk=event_id).values_list("result", flat=True).first()
    return "missing" if result is None else result
