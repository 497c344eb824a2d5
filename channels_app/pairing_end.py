"""A pairing that ends: a platform account that no longer speaks for its person.

The owner denies a paired account in the admin, unlinks it from its person, links it to
someone else or deletes it (a lost phone, a shared account, a number given to someone
new). From then on the account is an unknown sender (channels_app.receive); what it sent
before and what is on its way to it stops too: its messages still waiting for a turn are
not answered (no model call is made for them, nothing goes back), and replies to its
chat not yet sent are not sent. A reply written while the pairing ended is not planned
for it either (channels_app.delivery reads the pairing as it is then).
"""
from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from qorven.runtime.publisher import broadcast_soon
from sessions_app.models import Message
from sessions_app.services import message_answer_fail

from .models import ChannelBinding, Identity, OutboundDelivery

logger = logging.getLogger(__name__)

ENDED = "the sender's pairing was ended: it no longer speaks for this person"


def speaks_for(identity: Identity | None, user_id: int | None) -> bool:
    """Whether `identity` is a paired account of user `user_id` now."""
    return (identity is not None and user_id is not None and identity.user_id == user_id
            and identity.approval == Identity.Approval.APPROVED)


@transaction.atomic
def identity_pairing_end(*, identity: Identity, user_id: int) -> tuple[int, int]:
    """`identity` (as it was: tenant, channel, sender id, chat) no longer speaks for user
    `user_id`. Its messages in that person's chats still waiting for an answer end failed
    (kept, with why, for the admin; marked on the person's live surfaces) and the parts
    of replies waiting to be sent to its chat end failed. Returns (messages, parts)."""
    bindings = list(ChannelBinding.objects.filter(tenant_id=identity.tenant_id, kind=identity.channel)
                    .order_by().values_list("pk", flat=True))
    waiting = list(
        Message.objects.filter(
            tenant_id=identity.tenant_id, session__user_id=user_id, role=Message.Role.USER,
            answer_state=Message.Answer.PENDING, metadata__sender_id=identity.external_id,
            metadata__binding__in=bindings,
        ).order_by("session_id", "seq")
    ) if bindings else []
    for message in waiting:
        message_answer_fail(message=message, error=ENDED)
        state = {"type": "message.answer", "seq": message.seq, "answer_state": Message.Answer.FAILED}
        transaction.on_commit(lambda session_id=message.session_id, state=state: broadcast_soon(session_id, state))
    chats = {t for t in (identity.external_id, identity.reply_target) if t}
    parts = OutboundDelivery.objects.filter(
        tenant_id=identity.tenant_id, binding__kind=identity.channel, target__in=chats,
        message__session__user_id=user_id, state=OutboundDelivery.State.PENDING,
    ).update(state=OutboundDelivery.State.FAILED, last_error=ENDED, not_before=None, updated_at=timezone.now())
    if waiting or parts:
        # By the identity's row: its external id is a phone number or an address on some channels.
        logger.info("%s identity %s no longer paired to user %s: %d waiting message(s) not answered, %d part(s) "
                    "not sent", identity.channel, identity.pk, user_id, len(waiting), parts)
    return len(waiting), parts
