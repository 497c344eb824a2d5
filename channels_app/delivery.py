"""Outbound: an assistant message tagged with a platform's channel is sent there.

channels_app observes appends (after commit); the agent and the domain apps never call
an adapter. Each reply is split to the platform's limit and written in its formatting
(channels_app.formatting: the model's Markdown converted, a notice or a command's answer
of ours formatting nothing), and every part, as it will be sent, gets an OutboundDelivery
row (unique per message and part), so a part is sent at most once, and the same, even if
the append is observed twice or a send task runs again. Sending the planned parts is
channels_app.sending's.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar

from django.db import connection, transaction

from qorven.runtime.database import DATABASE_DOWN, connections_drop_broken
from qorven.runtime.insert_new import rows_insert_new
from qorven.runtime.prepared_read import PreparedRead
from qorven.runtime.task_scope import collecting
from sessions_app.models import Message
from sessions_app.services.append import message_delivery_planned, message_delivery_planned_statement

from .models import ChannelBinding, Identity, OutboundDelivery

logger = logging.getLogger(__name__)

# Message channel tag → the binding kind that delivers it: every one of
# sessions_app.channel_kinds.PLATFORM_CHANNELS, whose replies the store marks for delivery.
PLATFORM_OF = {
    "telegram": "telegram", "whatsapp": "whatsapp", "slack_dm": "slack", "slack": "slack",
    "discord_dm": "discord", "discord": "discord", "email": "email", "sms": "sms",
}


def on_message_appended(sender, message: Message, **kwargs) -> None:
    """Signal receiver: queue delivery of replies and notices for platform channels: the
    messages the store marked as awaiting it (sessions_app.services.append.delivery_awaited)."""
    if not message.delivery_unplanned:
        return
    try:
        deliveries_plan(message=message)
    except DATABASE_DOWN:
        # The reply is stored; only its planning met a lost connection. A task plans it
        # again (the broker is not the database), so the reply is not left unsent.
        from .tasks import deliveries_plan_task

        logger.warning("could not plan delivery of message %s now (database connection lost); queued", message.pk)
        connections_drop_broken()
        deliveries_plan_task.delay(message.tenant_id, message.pk)
    except Exception:  # a delivery problem must never break the append that caused it
        logger.exception("could not plan delivery of message %s", message.pk)


# Where a message goes: the binding, the chat, and the account (platform sender id, user
# id) that must still be paired for it to go there, if one must.
_Target = tuple[ChannelBinding, str, tuple[str, int] | None]


def _target(message: Message) -> _Target | None:
    """Where a message goes: our notice that a reply was not delivered in full goes where
    that reply went; any other back where the message it answers came from, else to the
    user's last known chat on that platform with this Qor. (Every read names its order:
    the models' default orders go through related tables, a join each.) A person's reply
    goes back to the account that asked only while that account is still paired to them:
    one whose pairing the owner ended while the model wrote is not answered there (the
    account is returned with the chat, and checked by the statement that plans the parts)."""
    kind = PLATFORM_OF[message.channel]
    undelivered = (message.metadata or {}).get("undelivered")
    if undelivered:  # our notice that part of that reply is missing: where that reply went
        part = (OutboundDelivery.objects.filter(tenant_id=message.tenant_id, message_id=undelivered)
                .select_related("binding").order_by("part").first())
        return (part.binding, part.target, None) if part is not None else None
    reply_to = (message.metadata or {}).get("reply_to")
    known = (_origins.get() or {}).get((message.tenant_id, message.session_id, reply_to)) if reply_to else None
    if known is None and reply_to:
        meta = Message.objects.filter(
            tenant_id=message.tenant_id, session_id=message.session_id, seq=reply_to
        ).order_by().values_list("metadata", flat=True).first() or {}
        binding_id = meta.get("binding")
        binding = binding_id and ChannelBinding.objects.filter(pk=binding_id, tenant_id=message.tenant_id).order_by().first()
        if binding and meta.get("reply_target"):
            known = binding, str(meta["reply_target"]), str(meta.get("sender_id") or "")
    session = message.session
    if known is not None:
        binding, target, sender = known
        return binding, target, ((sender, session.user_id) if session.user_id is not None and sender else None)
    if session.user_id is None:
        return None
    identity = Identity.objects.filter(
        tenant_id=message.tenant_id, channel=kind, user_id=session.user_id, approval=Identity.Approval.APPROVED
    ).exclude(reply_target="").order_by("-updated_at").first()
    binding = ChannelBinding.objects.filter(
        tenant_id=message.tenant_id, qor_id=session.qor_id, kind=kind, enabled=True
    ).order_by("pk").first()
    if identity is None or binding is None:
        return None
    return binding, identity.reply_target, None


# Asked for every reply to a platform message (compiled once: qorven.runtime.prepared_read;
# compiling it was most of what planning a reply cost).
_paired: PreparedRead[Identity] = PreparedRead(
    lambda tenant_id, channel, external_id, user_id: Identity.objects.filter(
        tenant_id=tenant_id, channel=channel, external_id=external_id, user_id=user_id,
        approval=Identity.Approval.APPROVED,
    ).only("pk").order_by()[:1],  # unique (tenant, channel, external id): no order
    tenant_id=int, channel=str, external_id=str, user_id=int,
)


def _still_paired(binding: ChannelBinding, sender: str, user_id: int) -> bool:
    return _paired.first(tenant_id=binding.tenant_id, channel=binding.kind, external_id=sender,
                         user_id=user_id) is not None


def deliveries_plan(*, message: Message) -> int:
    """Create the message's delivery parts (once: a part already planned is left as it is)
    and queue the send; the number of parts. Whatever comes of it — parts planned, no
    destination, the pairing ended — the message's mark of a delivery not yet planned goes
    once it has (one statement, after the parts'), so the sweeper never plans it again; a
    lost database connection leaves it for the planning task, or the sweep, to try again.
    A process dying between the parts and the mark leaves them both: the sweep plans it
    again, and the parts already planned stay as they are (nothing is sent twice)."""
    try:
        planned = _parts_plan(message)  # on PostgreSQL the mark goes with the parts' INSERT
    except DATABASE_DOWN:
        raise
    except Exception:
        message_delivery_planned(message=message)  # planning it again would fail the same way
        raise
    message_delivery_planned(message=message)
    return planned


def _parts_plan(message: Message) -> int:
    from .tasks import deliver_message_task

    target = _target(message)
    if target is None:
        logger.warning("no %s destination for message %s; not delivered", message.channel, message.pk)
        return 0
    binding, destination, paired_to = target
    from .adapters import adapter_for  # not at start-up: the adapters bring httpx and pydantic

    adapter = adapter_for(binding.kind)
    if adapter is None:
        return 0
    from .formatting import reply_parts

    parts = reply_parts(message.content or "(empty reply)", style=adapter.style, limit=adapter.limit,
                        size=adapter.length, markdown=written_by_model(message))
    # One statement, no transaction of its own; the unique (message, part) keeps a part
    # planned twice (the append observed twice, the planning task run again) a single row.
    # The account still paired is a condition of that statement, not a read before it.
    only_if = None
    if paired_to is not None:
        select, params = _paired.statement(tenant_id=binding.tenant_id, channel=binding.kind,
                                           external_id=paired_to[0], user_id=paired_to[1])
        only_if = (f"EXISTS ({select})", params)
    # Our notice of a reply the platform refused the account for (channels_app.send_failures)
    # is planned failed, never sent: through that account it could only fail too.
    not_sent = str((message.metadata or {}).get("not_sent") or "")
    state = OutboundDelivery.State.FAILED if not_sent else OutboundDelivery.State.PENDING
    # On PostgreSQL the message's mark of a delivery not yet planned goes in the same
    # statement, whatever it inserts (deliveries_plan clears it on SQLite, one statement
    # more, but none that crosses to another process).
    along = message_delivery_planned_statement(message=message) if connection.vendor == "postgresql" else None
    inserted = rows_insert_new([OutboundDelivery(tenant_id=message.tenant_id, message=message, part=index,
                                                 binding=binding, target=destination, text=text, state=state,
                                                 last_error=not_sent[:1000])
                                for index, text in enumerate(parts)], only_if=only_if, along=along)
    if along is not None:
        message.delivery_unplanned = None
    if not inserted and paired_to is not None and not _still_paired(binding, *paired_to):
        # Nothing planned, and not because it was planned before: the pairing ended.
        logger.warning("no %s destination for message %s; not delivered", message.channel, message.pk)
        return 0
    if not_sent:
        from .send_failures import delivery_failed_show

        if inserted:
            transaction.on_commit(lambda: delivery_failed_show(message.tenant_id, message.pk, binding.kind))
        return len(parts)
    key = (message.tenant_id, message.pk)
    transaction.on_commit(lambda: _send_soon(key, deliver_message_task))
    return len(parts)


def written_by_model(message: Message) -> bool:
    """Whether a message is the model's own writing, in Markdown (a reply, a heartbeat's
    result, a reminder), not a notice or a command's answer of ours, which may quote what
    people wrote: that is sent formatting nothing."""
    return message.role == Message.Role.ASSISTANT and not (message.metadata or {}).get("notice")


# Where the messages stored inside `origins_here()` came from — the binding and the chat to
# answer in — by (tenant id, session id, seq), noted once committed: the reply to one of
# them is planned without reading that message and its binding back.
_origins: ContextVar[dict[tuple[int, int, int], tuple[ChannelBinding, str, str]] | None] = ContextVar(
    "qorven_origins_here", default=None)


@contextmanager
def origins_here() -> Iterator[None]:
    """Remember, for the block, where the platform messages it stores came from
    (`origin_note`)."""
    token = _origins.set({})
    try:
        yield
    finally:
        _origins.reset(token)


def origin_note(*, message: Message, binding: ChannelBinding, reply_target: str, sender_id: str = "") -> None:
    """`message` (just stored) came from `binding`'s chat `reply_target`, sent by the
    platform's `sender_id`: noted inside `origins_here()` once its transaction commits (a
    seq rolled back may be taken again)."""
    known = _origins.get()
    if known is None or not reply_target:
        return
    key = (message.tenant_id, message.session_id, message.seq)
    transaction.on_commit(lambda: known.__setitem__(key, (binding, reply_target, sender_id)))


# Sends planned inside `deliveries_here()`: (tenant id, message id), in the order committed.
_here: ContextVar[list[tuple[int, int]] | None] = ContextVar("qorven_deliveries_here", default=None)


def deliveries_here() -> AbstractContextManager[list[tuple[int, int]]]:
    """Collect the sends planned in the block (once their replies are committed) instead
    of queuing a send task each: the task that wrote a reply sends it itself
    (channels_app.tasks.deliveries_send), one hop less between an answer and the platform."""
    return collecting(_here)


def _send_soon(key: tuple[int, int], task) -> None:
    collected = _here.get()
    if collected is None:
        task.delay(*key)
    elif key not in collected:
        collected.append(key)


def failed_deliveries(*, message_ids: list[int]) -> dict[int, str]:
    """Which of these messages have a part that could not be delivered: id → platform."""
    if not message_ids:
        return {}
    return dict(
        OutboundDelivery.objects.filter(message_id__in=message_ids, state=OutboundDelivery.State.FAILED)
        .values_list("message_id", "binding__kind")
    )
