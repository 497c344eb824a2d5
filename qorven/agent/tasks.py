"""Celery entry points of the agent."""
from __future__ import annotations

import logging

from celery import shared_task

from .turns import TurnBusy, turn_process

logger = logging.getLogger(__name__)

# A turn that finds its session busy comes back after 0.5, 1, 2, 4, 8, then every 10 seconds.
# The turn holding the session answers what arrived meanwhile anyway; this is for the
# moment it lets go, and a lease left by a dead worker (it expires within
# QORVEN_TURN_LEASE; the sweeper re-queues whatever is still unanswered after that).
BUSY_RETRIES = 12


def busy_delay(retries: int) -> float:
    return min(0.5 * 2**retries, 10.0)


@shared_task(bind=True, name="qorven.agent.turn", acks_late=True, max_retries=BUSY_RETRIES)
def agent_turn(self, tenant_id: int, session_id: int) -> int:
    """Answer the session's pending user messages. Safe to run twice: answered messages
    are skipped, and turns on one session never overlap."""
    try:
        return turn_process(tenant_id=tenant_id, session_id=session_id).answered
    except TurnBusy:
        if self.request.retries >= BUSY_RETRIES:
            logger.info("session %s stayed busy; leaving its messages to the turn holding it", session_id)
            return 0
        raise self.retry(countdown=busy_delay(self.request.retries)) from None
