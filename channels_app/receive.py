"""From a verified webhook to a stored, answered message.

The webhook stores each InboundMessage as an InboundEvent (deduped by the platform's id)
and answers at once, with no call to the platform: media are stored as references.
`inbound_process`, run as a task, takes a sender's events in order and applies the channel
rules to each (channels_app.inbound_rules): pairing for unknown senders, groups answered
only when addressed, the surface's trust; the media fetched, the message is handed to the
agent's gateway.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from qorven.runtime.cache_away import cache_unreachable
from qorven.runtime.database import DATABASE_DOWN, connections_drop_broken
from qorven.runtime.log_context import log_person
from qorven.runtime.prepared_read import PreparedRead
from qorven.runtime.publish import publish_or_hold, tasks_publish
from tenancy.switches import channel_enabled_cached, switched_off_of, switches_seen

from .adapters import adapter_for
from .event_done import event_done_result, event_done_riding
from .event_insert import events_insert
from .event_states import event_claim, event_claim_give_back, event_fail, event_finish, event_result
from .inbound import InboundMessage
from .inbound_rules import inbound_message_handle
from .models import ChannelBinding, InboundEvent

logger = logging.getLogger(__name__)


def inbound_receive(*, binding: ChannelBinding, message: InboundMessage) -> int | None:
    """Store the message as received and queue its processing after commit; the new
    event's id. A message id seen before on this binding is neither stored nor processed
    again (None)."""
    return inbound_store(items=[(binding, message)])[0]


def inbound_store(*, items: Sequence[tuple[ChannelBinding, InboundMessage]]) -> list[int | None]:
    """Store received messages, of one webhook or of many (a server's webhooks arriving
    together share one statement and one commit: channels_app.webhook_ingest), and queue
    the processing of each new one after commit; each item's new event id. One INSERT …
    ON CONFLICT DO NOTHING (channels_app.event_insert): a message id already stored on its
    binding (a platform's retry, or the same update twice in one batch) is skipped and
    answered None, with no error to recover from, so this runs alike in autocommit and
    inside a caller's transaction. Events get their ids in the order given, which is the
    order a sender's messages are processed in."""
    from .tasks import inbound_fan_out_task, inbound_process_task

    if not items:
        return []
    rows = [(binding.tenant_id, binding.pk, message.external_id, message.sender_id[:255],
             message.model_dump(mode="json")) for binding, message in items]
    stored = events_insert(transaction.get_connection(), rows, now=timezone.now())
    # A repeat in the batch finds its id taken by the first: None, as for one stored before.
    ids = [stored.pop((binding_id, external_id), None) for _, binding_id, external_id, _, _ in rows]
    queued = [(row[0], pk) for row, pk in zip(rows, ids) if pk is not None]
    # Robust: once stored, an event is never lost to a broker that will not take its task
    # (the sweeper queues it again); the webhook still answers 200.
    # Held by the webhooks' storing thread, which answers before it publishes.
    if len(queued) >= FAN_OUT_MIN:
        # Named, not shown: Celery would otherwise walk the whole list to print it in the message.
        transaction.on_commit(lambda: publish_or_hold(lambda: inbound_fan_out_task.apply_async(
            (queued,), argsrepr=f"[{len(queued)} events]")), robust=True)
    elif queued:
        transaction.on_commit(lambda: publish_or_hold(lambda: tasks_publish(inbound_process_task, queued)),
                              robust=True)
    return ids


# A burst stored together is queued with one task that queues each event's from a worker: a
# publish is ~0.4 ms of the storing process's CPU (half of what a webhook costs it under
# load), and one per event capped what a server accepts. Its events reach their worker one
# hop later; fewer than this many at a time are queued directly, one hop from their turn.
FAN_OUT_MIN = 4


def gateway_frame_receive(*, binding: ChannelBinding, frame: dict, bot_id: str) -> int | None:
    """A Discord Gateway frame, as `qorven discord-gateway` reads it: a MESSAGE_CREATE is
    parsed by the adapter and stored like a webhook's message — unless the tenant has the
    channel switched off, which a webhook answers 404 and the gateway skips the same way
    (nothing stored, nothing answered). Other frames are ignored (None)."""
    if frame.get("t") != "MESSAGE_CREATE" or not isinstance(frame.get("d"), dict):
        return None
    if not channel_enabled_cached(tenant=binding.tenant, channel=binding.kind):
        return None
    message = adapter_for(binding.kind).from_gateway(binding, frame["d"], bot_id)
    return inbound_receive(binding=binding, message=message) if message is not None else None


class InboundBusy(Exception):
    """An earlier message of the same sender is being processed by another task; this
    one comes back shortly, so the sender's messages keep their order."""


def _waiting(*, tenant_id: Any, **filters: Any) -> QuerySet[InboundEvent]:
    """The tenant's events still to be processed (or in a task's hands), oldest first."""
    return InboundEvent.objects.filter(
        tenant_id=tenant_id, state__in=[InboundEvent.State.PENDING, InboundEvent.State.PROCESSING], **filters
    ).order_by("pk")


# Read for every platform message (compiled once: qorven.runtime.prepared_read). The
# event comes with its sender's oldest event still waiting (`head_id`; itself, usually)
# and its tenant's switched-off switches, read fresh, for the channel rules.
_event_for_task: PreparedRead[InboundEvent] = PreparedRead(
    lambda tenant_id, event_id: InboundEvent.objects.select_related("binding__tenant", "binding__qor").filter(
        tenant_id=tenant_id, pk=event_id
    ).annotate(head_id=Subquery(_waiting(
        tenant_id=OuterRef("tenant_id"), binding_id=OuterRef("binding_id"), sender_id=OuterRef("sender_id"),
        pk__lte=OuterRef("pk")).values("pk")[:1]), switched_off=switched_off_of("tenant_id")).order_by()[:1],
    tenant_id=int, event_id=int,
)
_oldest_waiting: PreparedRead[InboundEvent] = PreparedRead(
    lambda tenant_id, binding_id, sender_id, event_id: _waiting(
        tenant_id=tenant_id, binding_id=binding_id, sender_id=sender_id, pk__lte=event_id)[:1],
    tenant_id=int, binding_id=int, sender_id=str, event_id=int,
)


def inbound_event(*, tenant_id: int, event_id: int) -> InboundEvent | None:
    """A stored event of the tenant with its binding, the binding's tenant and Qor. Inside
    tenancy.switches.switches_passed_on() (the inbound task), the tenant's switches read
    with it answer the channel rules' look at the channel's switch: one statement, where
    the switches were a read of their own on every platform message."""
    event = _event_for_task.first(tenant_id=tenant_id, event_id=event_id)
    if event is not None:
        switches_seen(tenant_id=tenant_id, switched_off=event.switched_off)  # type: ignore[attr-defined]
    return event


_UNREAD = object()


def inbound_process(*, event: InboundEvent, reclaim: int | None = None) -> str:
    """Apply the channel rules and hand the message on. Safe to run twice: each event is
    claimed by one task, and a claimed or finished event is not processed again.

    Several workers process events at once, so a sender's events are taken strictly in the
    order they arrived: this task processes the sender's earlier events still waiting
    first, and raises InboundBusy when one of them is in another task's hands. A person's
    messages reach the conversation in the order they were sent, whichever task runs first.

    `reclaim`: an event this task had claimed when its database connection was lost and
    could not give back (the database was still away): taken again at once, not waited
    for until the claim goes stale. A lost connection raised from here names that event
    (`claimed_event` on the exception).
    """
    stale = timezone.now() - timedelta(seconds=CLAIM_STALE_AFTER)
    # As read by inbound_event: the sender's oldest waiting event is this one (the usual
    # case), none (this one is done or failed) or an earlier one (looked at below).
    read_head = getattr(event, "head_id", _UNREAD)
    while True:
        if read_head == event.pk:
            head: InboundEvent | None = event
        elif read_head is None:
            return event.result
        else:
            head = _oldest_waiting.first(tenant_id=event.tenant_id, binding_id=event.binding_id,
                                         sender_id=event.sender_id, event_id=event.pk)
        read_head = _UNREAD  # read afresh from here on
        if head is None:  # this event is done (or failed), by this task or another
            return event_result(tenant_id=event.tenant_id, event_id=event.pk)
        if head.state == InboundEvent.State.PROCESSING and head.updated_at > stale and head.pk != reclaim:
            raise InboundBusy(head.pk)
        if not event_claim(tenant_id=head.tenant_id, event_id=head.pk, state=head.state, updated_at=head.updated_at):
            continue  # another task took it a moment ago: look again
        head.binding = event.binding
        try:
            result = _process_event(head)
        except DATABASE_DOWN as exc:
            if not _claim_give_back(head):
                exc.claimed_event = head.pk  # type: ignore[union-attr]
            raise
        except Exception as exc:
            if cache_unreachable(exc):
                _claim_give_back(head)  # taken again by the task's retry, as after a lost connection
            raise
        if head.pk == event.pk:
            return result


def _claim_give_back(event: InboundEvent) -> bool:
    """A lost database connection interrupted the event's processing (before or after it
    was handed on): the claim is given back at once, so the task's retry — not a claim
    going stale minutes later — takes it again. Processing it again stores nothing twice
    (messages are unique by their platform id). If the database is still away (False),
    the task's retry takes its own claim again (`reclaim`); anyone else waits until it
    goes stale (CLAIM_STALE_AFTER)."""
    connections_drop_broken()
    try:
        event_claim_give_back(tenant_id=event.tenant_id, event_id=event.pk)
        return True
    except DATABASE_DOWN:
        connections_drop_broken()
        return False


# A claim this old belongs to a task that died; its event may be taken over.
CLAIM_STALE_AFTER = 120


def _process_event(event: InboundEvent) -> str:
    """Process one claimed event. A failure is recorded on the event (the admin shows it)
    and does not hold up the sender's later messages."""
    # What is logged meanwhile (an error, a refused pairing code) may quote the sender's id.
    with log_person(event.sender_id):
        try:
            message = InboundMessage.model_validate(event.payload)
            with event_done_riding(tenant_id=event.tenant_id, event_id=event.pk) as done:
                result = inbound_message_handle(event.binding, message)
        except DATABASE_DOWN:
            raise  # the connection was lost, not the message (see inbound_process)
        except Exception as exc:
            if cache_unreachable(exc):
                raise  # the cache is away, not the message: the task comes back for it
            logger.exception("inbound event %s could not be processed", event.pk)
            event_fail(tenant_id=event.tenant_id, event_id=event.pk, error=f"{type(exc).__name__}: {exc}")
            return "error"
    # The message lives in the conversation from here on (or was never to be kept: an
    # unknown sender's): the event keeps only what recognises a platform's retry of it.
    # Marked so by the statement that stored the message, if it could be
    # (channels_app.event_done): nothing more to write.
    if event_done_result(done) == result:
        return result
    event_finish(tenant_id=event.tenant_id, event_id=event.pk, result=result)
    return result
