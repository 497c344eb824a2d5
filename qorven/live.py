"""Live events on the channel layer. The layer is a notification, not storage: a client
that missed an event catches up from the database by seq."""
from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)


def session_group(session_id: int) -> str:
    return f"qorven.session.{session_id}"


async def broadcast(session_id: int, event: dict[str, Any]) -> None:
    """Send `event` (with a `type` such as message.chunk) to everyone watching the session.
    Never raises: a live surface missing an event must not fail the work that made it."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(session_group(session_id), {"session_id": session_id, **event})
    except Exception:
        logger.warning("could not broadcast %s to session %s", event.get("type"), session_id, exc_info=True)


def broadcast_sync(session_id: int, event: dict[str, Any]) -> None:
    async_to_sync(broadcast)(session_id, event)
