"""Celery entry points of the agent."""
from __future__ import annotations

import logging

from celery import shared_task

from .turns import TurnBusy, turn_process

logger = logging.getLogger(__name__)


@shared_task(bind=True, name="qorven.agent.turn", acks_late=True, max_retries=20)
def agent_turn(self, tenant_id: int, session_id: int) -> int:
    """Answer the session's pending user messages. Safe to run twice: answered messages
    are skipped, and turns on one session never overlap."""
    try:
        return turn_process(tenant_id=tenant_id, session_id=session_id).answered
    except TurnBusy as exc:
        raise self.retry(exc=exc, countdown=2) from None
