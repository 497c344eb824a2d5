"""Celery entry points of the edges: process an inbound event, deliver a reply."""
from __future__ import annotations

import logging
import time

from celery import shared_task
from django.conf import settings

from .delivery import RetryLater, deliver_message
from .models import InboundEvent
from .receive import inbound_process

logger = logging.getLogger(__name__)


@shared_task(name="channels_app.inbound", acks_late=True)
def inbound_process_task(tenant_id: int, event_id: int) -> str:
    """Apply channel rules to a stored inbound event. Safe to run twice."""
    event = InboundEvent.objects.select_related("binding__tenant", "binding__qor").filter(
        tenant_id=tenant_id, pk=event_id
    ).first()
    if event is None:
        return "missing"
    return inbound_process(event=event)


@shared_task(bind=True, name="channels_app.deliver", acks_late=True, max_retries=None)
def deliver_message_task(self, tenant_id: int, message_id: int) -> int:
    """Send a message's parts; transient failures retry with backoff (honouring the
    platform's retry-after), permanent ones are recorded. Each part is sent once."""
    attempt = self.request.retries
    while True:
        try:
            return deliver_message(tenant_id=tenant_id, message_id=message_id, attempt=attempt)
        except RetryLater as exc:
            attempt += 1
            if attempt > settings.QORVEN_SEND_RETRIES:
                logger.warning("giving up delivering message %s: %s", message_id, exc)
                return 0
            if self.request.is_eager or settings.QORVEN_INPROCESS_TASKS:
                time.sleep(min(exc.after, 30))  # in-process: wait here, the queue is ours
                continue
            raise self.retry(countdown=exc.after, max_retries=settings.QORVEN_SEND_RETRIES) from None
