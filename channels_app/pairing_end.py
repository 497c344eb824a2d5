"""A pairing that ends: a platform account that no longer speaks for its person.

The owner denies a paired account in the admin, unlinks it from its person, links it to
someone else or deletes it, or revokes it with `qorven pair revoke` or `/pair revoke`
(pairing_revoke) — a lost phone, a shared account, a number given to someone new. From then on the account is an unknown sender (channels_app.inbound_rules); what it sent
before and what is on its way to it stops too: its messages still waiting for a turn are
not answered (no model call is made for them, nothing goes back), and replies to its
chat not yet sent are not sent. A reply written while the pairing ended is not planned
for it either (channels_app.delivery reads the pairing as it is then).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from qorven.runtime.publisher import broadcast_soon
from sessions_app.models import Message
from sessions_app.services.answers import message_answer_fail
from tenancy.models import Tenant

from .models import ChannelBinding, Identity, OutboundDelivery
from .pairing import paired_identity_get

logger = logging.getLogger(__name__)

ENDED = "the sender's pairing was ended: it no longer speaks for this person"


def speaks_for(identity: Identity | None, user_id: int | None) -> bool:
    """Whether `identity` is a paired account of user `user_id` now."""
    return (identity is not None and user_id is not None and identity.user_id == user_id
            and identity.approval == Identity.Approval.APPROVED)


def _waiting(identity: Identity, user_id: int) -> QuerySet[Message]:
    """The account's messages in that person's chats still waiting for an answer."""
    bindings = list(ChannelBinding.objects.filter(tenant_id=identity.tenant_id, kind=identity.channel)
                    .order_by().values_list("pk", flat=True))
    return Message.objects.filter(
        tenant_id=identity.tenant_id, session__user_id=user_id, role=Message.Role.USER,
        answer_state=Message.Answer.PENDING, metadata__sender_id=identity.external_id,
        metadata__binding__in=bindings,
    ) if bindings else Message.objects.none()


def _unsent(identity: Identity, user_id: int) -> QuerySet[OutboundDelivery]:
    """The parts of that person's replies waiting to be sent to the account's chat."""
    chats = {t for t in (identity.external_id, identity.reply_target) if t}
    return OutboundDelivery.objects.filter(
        tenant_id=identity.tenant_id, binding__kind=identity.channel, target__in=chats,
        message__session__user_id=user_id, state=OutboundDelivery.State.PENDING,
    )


def pairing_end_preview(*, identity: Identity) -> tuple[int, int]:
    """What ending `identity`'s pairing now would stop: (messages, parts), as
    identity_pairing_end counts them. Changes nothing."""
    if not speaks_for(identity, identity.user_id):
        return 0, 0
    assert identity.user_id is not None
    return _waiting(identity, identity.user_id).count(), _unsent(identity, identity.user_id).count()


@transaction.atomic
def identity_pairing_end(*, identity: Identity, user_id: int) -> tuple[int, int]:
    """`identity` (as it was: tenant, channel, sender id, chat) no longer speaks for user
    `user_id`. Its messages in that person's chats still waiting for an answer end failed
    (kept, with why, for the admin; marked on the person's live surfaces) and the parts
    of replies waiting to be sent to its chat end failed. Returns (messages, parts)."""
    waiting = list(_waiting(identity, user_id).order_by("session_id", "seq"))
    for message in waiting:
        message_answer_fail(message=message, error=ENDED)
        state = {"type": "message.answer", "seq": message.seq, "answer_state": Message.Answer.FAILED}
        transaction.on_commit(lambda session_id=message.session_id, state=state: broadcast_soon(session_id, state))
    parts = _unsent(identity, user_id).update(
        state=OutboundDelivery.State.FAILED, last_error=ENDED, not_before=None, updated_at=timezone.now())
    if waiting or parts:
        # By the identity's row: its external id is a phone number or an address on some channels.
        logger.info("%s identity %s no longer paired to user %s: %d waiting message(s) not answered, %d part(s) "
                    "not sent", identity.channel, identity.pk, user_id, len(waiting), parts)
    return len(waiting), parts


@dataclass(frozen=True)
class Revoked:
    """A pairing ended by pairing_revoke: the account, whose it was, and what it stopped."""

    identity: Identity
    username: str
    messages: int
    parts: int


@transaction.atomic
def pairing_revoke(*, tenant: Tenant, identity_id: int, unlink: bool = False, via: str = "cli") -> Revoked:
    """End the pairing of `tenant`'s paired account `identity_id`, as the admin ends one:
    denied (what it sends from now on is not answered, and it gets no new code), or with
    `unlink` unlinked from its person (a stranger again, who may ask for a new code). What
    it sent and is still waiting for a turn, and replies not yet sent to it, stop
    (identity_pairing_end). Raises NotPaired for an account of another tenant or one not
    paired."""
    identity = paired_identity_get(tenant=tenant, identity_id=identity_id, lock=True)
    user_id, username = identity.user_id, identity.user.get_username() if identity.user else ""
    assert user_id is not None
    if unlink:
        identity.user, identity.approval = None, Identity.Approval.PENDING
    else:
        identity.approval = Identity.Approval.DENIED
    identity.save(update_fields=["user", "approval", "updated_at"])
    messages, parts = identity_pairing_end(identity=identity, user_id=user_id)
    logger.info("pairing %s: %s identity %s of user %s (via %s)", "unlinked" if unlink else "revoked",
                identity.channel, identity.pk, user_id, via)
    return Revoked(identity=identity, username=username, messages=messages, parts=parts)
