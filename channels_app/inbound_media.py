"""A platform message's attachments, fetched by the processing task before the message is
stored — or, for someone the binding does not answer, counted and never fetched."""
from __future__ import annotations

import logging

from .adapters import adapter_for
from .inbound import InboundImage, InboundMessage
from .models import ChannelBinding

logger = logging.getLogger(__name__)


def inbound_images(binding: ChannelBinding, message: InboundMessage, meta: dict) -> tuple[list[InboundImage], dict]:
    """The message's attachments: those it came with, and the media it names, fetched now —
    before the message is stored, outside any transaction, so its turn is queued with them
    in place — and `meta` with how many were `left_out`: one that cannot be had (too big,
    unreachable, of a kind not kept; the adapter logs why) is counted there, so the model
    can tell the person, and the text counts without it."""
    images = list(message.images)
    adapter = adapter_for(binding.kind)
    missing = message.left_out
    for media in message.media if adapter is not None else []:
        try:
            image = adapter.fetch_media(binding, media)
        except Exception as exc:  # an adapter's own failure must not lose the message either
            # Its kind only: an exception's text can hold a URL, and a URL a token.
            logger.warning("a media item on binding %s could not be fetched: %s", binding.pk, type(exc).__name__)
            image = None
        if image is None:
            missing += 1
        else:
            images.append(image)
    return images, ({**meta, "left_out": missing} if missing else meta)


def strangers_media(message: InboundMessage, meta: dict) -> dict:
    """`meta` of a group message from someone the binding does not answer, its
    attachments counted as `left_out` and none fetched: the host takes no files from people
    it never agreed to serve, and the model, shown the message as the group's context, is
    told an attachment was sent and not kept (qorven.agent.attachments)."""
    sent = message.left_out + len(message.media) + len(message.images)
    return {**meta, "left_out": sent, "left_out_why": "unpaired"} if sent else meta
