"""What is particular to channels_redis' pub/sub layer (the live layer on Redis by default),
for the hub and for the terminal's follower: a join takes effect later than it returns (see
qorven.runtime.hub's note), so a reader waits to hear its own note on each group it joined;
a leave that returned can be taken back as the layer reconnects (`held`)."""
from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

logger = logging.getLogger(__name__)

JOINED = "hub.joined"
JOIN_NOTE_EVERY = 0.05  # seconds between notes while a pub/sub join is not yet heard
JOIN_HEARD_WITHIN = 2.0  # seconds a join waits to hear its note before going on regardless


def is_pubsub(layer: Any) -> bool:
    """Whether `layer` is channels_redis' pub/sub layer, whose group_add returns before
    Redis has taken the subscription."""
    try:
        from channels_redis.pubsub import RedisPubSubChannelLayer
    except ImportError:
        return False
    return isinstance(layer, RedisPubSubChannelLayer)


async def joins_heard(layer: Any, channel: str, groups: list[str],
                      receiving: asyncio.Task | None = None) -> tuple[asyncio.Task | None, list[dict]]:
    """For a reader of its own channel (the terminal's follower, not a hub), after joining
    `groups`: on the pub/sub layer, wait until a note sent to each group comes back on
    `channel` (see qorven.runtime.hub's note), JOIN_HEARD_WITHIN at most. `receiving` is the
    reader's receive already outstanding, if any. Returns the receive still outstanding,
    to be awaited next (the pub/sub layer drops a channel whose receive is cancelled), and
    the other events read meanwhile, in order. Other layers: (receiving, [])."""
    if not groups or not is_pubsub(layer):
        return receiving, []
    token = uuid.uuid4().hex
    waiting, early = set(groups), []
    try:
        async with asyncio.timeout(JOIN_HEARD_WITHIN):
            while waiting:
                for group in waiting:
                    await layer.group_send(group, {"type": JOINED, "group": group, "token": token})
                if receiving is None:
                    receiving = asyncio.ensure_future(layer.receive(channel))
                done, _ = await asyncio.wait({receiving}, timeout=JOIN_NOTE_EVERY)
                if done:
                    event, receiving = receiving.result(), None
                    if event.get("type") == JOINED and event.get("token") == token:
                        waiting.discard(event.get("group"))
                    elif event.get("type") != JOINED:
                        early.append(event)
    except TimeoutError:
        logger.warning("did not hear the joins of %s within %s s", ", ".join(sorted(waiting)), JOIN_HEARD_WITHIN)
    return receiving, early


def held(layer: Any, group: str) -> bool | None:
    """Whether this process is still subscribed to `group` on Redis, which none of its
    channels is in any more: False once Redis has confirmed the end of the subscription
    (and on layers other than the pub/sub one, where a leave that returned is done), None
    while that answer is awaited, True when nothing is ending it any more.

    channels_redis takes a subscription for ended once its UNSUBSCRIBE is written; redis-py
    forgets it only on Redis's answer, and when its connection is made again it drops the
    answers it awaited and subscribes again to every name it has not forgotten. So an
    UNSUBSCRIBE lost with the connection, or written while the connection was being made
    again, leaves the process subscribed, and subscribed again at each reconnection, for
    the life of the server: True."""
    if not is_pubsub(layer):
        return False
    name = layer._get_group_channel_name(group)
    if layer.groups.get(name):  # another channel of this process is in it: not ours to end
        return False
    pubsub = layer._get_shard(name)._pubsub
    if pubsub is None:  # never connected, or flushed: subscribed to nothing
        return False
    key = pubsub.encoder.decode(pubsub.encoder.encode(name))  # the name as redis-py keeps it
    if key not in pubsub.channels:
        return False
    return None if key in pubsub.pending_unsubscribe_channels else True
