"""How a part of a reply sent to a platform ends failed, and who is told.

A part fails alone: refused for good, in doubt (the request went out and no answer came
back), out of retries, cut off by a worker that died mid-send, or reported undelivered
by the platform later. The parts behind it are still sent (channels_app.sending). Live
surfaces mark the reply "not delivered to <platform>" at once; the admin keeps the
platform's error. Once nothing of a reply in several parts is left to send and one of
them failed, the person on the platform gets one notice of ours saying something of it
may be missing (`reply_undelivered_tell`) — never the platform's words.
"""
from __future__ import annotations

import logging

from django.utils import timezone

from sessions_app.errors import SessionClosed
from sessions_app.models import Message
from sessions_app.services import message_append

from .adapters.base import Undelivered
from .models import ChannelBinding, OutboundDelivery

logger = logging.getLogger(__name__)

# Why a part ended failed when nobody can tell whether the platform got it.
MAYBE_DELIVERED = "it may or may not have been delivered"

# The notice (its key in message metadata, and its text) the person gets on the platform.
# "May not": a part cut off mid-send or left without an answer may have got there.
UNDELIVERED = "reply_undelivered"
UNDELIVERED_NOTICE = ("Part of my last reply may not have reached you, so something above may be missing. "
                      "Ask me to send it again if you need it.")


def delivery_failed_show(tenant_id: int, message_id: int, platform: str) -> None:
    """Live surfaces mark the reply "not delivered to <platform>"."""
    from qorven.runtime.publisher import broadcast_soon

    row = Message.objects.filter(tenant_id=tenant_id, pk=message_id).values("session_id", "seq").first()
    if row is not None:
        broadcast_soon(row["session_id"], {"type": "message.delivery", "seq": row["seq"], "delivery": "failed",
                                           "platform": platform})


def part_give_up(*, row: OutboundDelivery) -> bool:
    """The part's retries are spent: it ends failed, its last error kept for the admin.
    Only this part: the ones behind it get their own tries."""
    if not OutboundDelivery.objects.filter(pk=row.pk, state=OutboundDelivery.State.PENDING).update(
        state=OutboundDelivery.State.FAILED, not_before=None, updated_at=timezone.now(),
        last_error=f"gave up after {row.attempts} attempts; last error: {row.last_error}"[:1000],
    ):
        return False
    logger.warning("gave up delivering message %s part %s after %s attempts", row.message_id, row.part, row.attempts)
    delivery_failed_show(row.tenant_id, row.message_id, row.binding.kind)
    return True


def deliveries_interrupted_fail(*, binding_id: int) -> list[tuple[int, int]]:
    """With the binding's gate held (channels_app.send_gate.binding_taken), so nothing is
    being sent on it: its parts still `sending` were cut off by a sender that died. They
    may have reached the platform, and a part is never sent twice, so they end failed,
    shown as such. Returns the (tenant id, message id) of their replies, whose other parts
    are to be sent (and the person told) once the gate is let go."""
    rows = list(OutboundDelivery.objects.filter(binding_id=binding_id, state=OutboundDelivery.State.SENDING)
                .select_related("binding").order_by("pk"))
    failed: list[tuple[int, int]] = []
    for row in rows:
        if OutboundDelivery.objects.filter(pk=row.pk, state=OutboundDelivery.State.SENDING).update(
            state=OutboundDelivery.State.FAILED, updated_at=timezone.now(),
            last_error=f"the worker stopped while sending this part; {MAYBE_DELIVERED}",
        ):
            logger.warning("message %s part %s was cut off mid-send; %s", row.message_id, row.part, MAYBE_DELIVERED)
            delivery_failed_show(row.tenant_id, row.message_id, row.binding.kind)
            if (row.tenant_id, row.message_id) not in failed:
                failed.append((row.tenant_id, row.message_id))
    return failed


def deliveries_undelivered(*, binding: ChannelBinding, reports: list[Undelivered]) -> int:
    """The platform reports parts of `binding`'s it had accepted as undelivered after all:
    they end failed, with its reason kept for the admin, and live surfaces mark the reply
    "not delivered". A report already taken, or for a part that is not ours, changes
    nothing. Returns how many parts were failed."""
    reasons = {r.platform_message_id: r.reason for r in reports}
    rows = list(OutboundDelivery.objects.filter(
        tenant_id=binding.tenant_id, binding=binding, platform_message_id__in=list(reasons),
        state=OutboundDelivery.State.SENT,
    ).order_by("pk").values_list("pk", "message_id", "platform_message_id"))
    failed = 0
    for pk, message_id, platform_id in rows:
        if OutboundDelivery.objects.filter(pk=pk, state=OutboundDelivery.State.SENT).update(
            state=OutboundDelivery.State.FAILED, last_error=reasons[platform_id][:1000], updated_at=timezone.now(),
        ):
            failed += 1
            logger.warning("delivery of message %s was reported undelivered by %s", message_id, binding.kind)
            delivery_failed_show(binding.tenant_id, message_id, binding.kind)
            reply_undelivered_tell(tenant_id=binding.tenant_id, message_id=message_id)
    if len(rows) < len(reasons):
        logger.info("%s reported %d parts undelivered that are not this binding's sent parts",
                    binding.kind, len(reasons) - len(rows))
    return failed


def reply_undelivered_tell(*, tenant_id: int, message_id: int) -> bool:
    """If nothing of the reply is left to send and one of its parts (of two or more) ended
    failed, tell the person where it went: a notice of ours, appended to the conversation
    with the reply's channel (so it is delivered to the same chat — channels_app.delivery
    — and shown on the page; as every notice, never read by the model). Once per reply:
    the notice's external id is the reply's, so running this again stores and sends
    nothing. Returns whether the notice was stored now."""
    states = list(OutboundDelivery.objects.filter(tenant_id=tenant_id, message_id=message_id)
                  .values_list("state", flat=True))
    if (len(states) < 2 or OutboundDelivery.State.FAILED not in states
            or OutboundDelivery.State.PENDING in states or OutboundDelivery.State.SENDING in states):
        return False
    reply = Message.objects.filter(tenant_id=tenant_id, pk=message_id).select_related("session").first()
    if reply is None or (reply.metadata or {}).get("notice") == UNDELIVERED:
        return False
    try:
        stored = message_append(session=reply.session, role=Message.Role.SYSTEM, content=UNDELIVERED_NOTICE,
                                channel=reply.channel, external_scope=UNDELIVERED, external_id=str(reply.pk),
                                metadata={"notice": UNDELIVERED, "undelivered": reply.pk})
    except SessionClosed:
        logger.info("message %s was not delivered in full; its chat was cleared since, so nobody is told", reply.pk)
        return False
    if stored.created:
        logger.info("message %s was not delivered in full; the person is told", reply.pk)
    return stored.created
