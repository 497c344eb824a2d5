"""Celery entry points of the agent."""
from __future__ import annotations

import logging

from celery import shared_task

from .turns import TurnBusy, turn_process

logger = logging.getLogger(__name__)

# A turn that finds its session busy comes back after 0.5, 1, 2, 4, 8, then every 10
# seconds. The turn holding the session answers what arrived meanwhile anyway; this is for
# the moment it lets go, and for a lease left by a dead worker (it runs out within
# QORVEN_TURN_LEASE; the sweeper queues whatever is still unanswered after that).
BUSY_RETRIES = 12


def busy_delay(busy: int) -> float:
    return min(0.5 * 2**busy, 10.0)


@shared_task(bind=True, name="qorven.agent.turn", acks_late=True, max_retries=None)
def agent_turn(self, tenant_id: int, session_id: int, busy: int = 0) -> int:
    """Answer the session's pending user messages. Safe to run twice: answered messages
    are skipped, and turns on one session never overlap. Comes back later when the
    session is busy (`busy` counts those tries) or a message failed transiently (its own
    tries are counted on the message, up to QORVEN_ANSWER_ATTEMPTS)."""
    try:
        outcome = turn_process(tenant_id=tenant_id, session_id=session_id)
    except TurnBusy:
        if busy >= BUSY_RETRIES:
            logger.info("session %s stayed busy; leaving its messages to the turn holding it", session_id)
            return 0
        raise self.retry(args=(tenant_id, session_id), kwargs={"busy": busy + 1}, countdown=busy_delay(busy)) from None
    if outcome.retry_after is not None:
        raise self.retry(args=(tenant_id, session_id), kwargs={"busy": 0}, countdown=outcome.retry_after)
    return outcome.answered
