"""Celery entry points of the edges: process an inbound event, deliver a reply."""
from __future__ import annotations

import logging

from celery import shared_task, signals
from django.conf import settings

from .delivery import RetryLater, deliver_message, deliveries_give_up
from .models import InboundEvent
from .receive import InboundBusy, inbound_process

logger = logging.getLogger(__name__)

INBOUND_BUSY_RETRIES = 300  # a minute of 0.2 s waits for the sender's earlier message


@shared_task(bind=True, name="channels_app.inbound", acks_late=True, max_retries=INBOUND_BUSY_RETRIES)
def inbound_process_task(self, tenant_id: int, event_id: int) -> str:
    """Apply channel rules to a stored inbound event. Safe to run twice. Comes back
    shortly while the same sender's earlier message is still being processed."""
    event = InboundEvent.objects.select_related("binding__tenant", "binding__qor").filter(
        tenant_id=tenant_id, pk=event_id
    ).first()
    if event is None:
        return "missing"
    try:
        return inbound_process(event=event)
    except InboundBusy:
        if self.request.retries >= INBOUND_BUSY_RETRIES:
            return "busy"  # left pending: the sweeper queues it again
        raise self.retry(countdown=0.2) from None


@shared_task(bind=True, name="channels_app.deliver", acks_late=True, max_retries=None)
def deliver_message_task(self, tenant_id: int, message_id: int) -> int:
    """Send a message's parts. A transient failure comes back after a backoff (or the
    platform's retry-after) up to QORVEN_SEND_RETRIES times, then the parts left are marked
    failed; a permanent one fails its part at once. Each part is sent once."""
    attempt = self.request.retries
    try:
        return deliver_message(tenant_id=tenant_id, message_id=message_id, attempt=attempt)
    except RetryLater as exc:
        if attempt >= settings.QORVEN_SEND_RETRIES:
            deliveries_give_up(tenant_id=tenant_id, message_id=message_id, attempts=attempt + 1)
            return 0
        raise self.retry(countdown=exc.after) from None


@shared_task(name="channels_app.sweep", acks_late=True)
def sweep_task() -> dict[str, int]:
    """Queue again what a dead worker left behind (see channels_app.sweep). Run by Celery
    beat every QORVEN_SWEEP_INTERVAL seconds and by every worker as it starts."""
    from dataclasses import asdict

    from .sweep import sweep

    return asdict(sweep())


@signals.worker_ready.connect(weak=False)
def _sweep_when_a_worker_starts(**kwargs) -> None:
    sweep_task.delay()
