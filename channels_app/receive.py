"""From a verified webhook to a stored, answered message.

The webhook stores each InboundMessage as an InboundEvent (deduped by the platform's id)
and answers at once, with no call to the platform: media are stored as references.
`inbound_process`, run as a task, applies the channel rules — pairing for unknown senders,
groups answered only when addressed, the surface's trust — fetches the media, and hands
the message to the agent's gateway.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from qorven.agent.gateway import inbound_accept
from qorven.runtime.database import DATABASE_DOWN, connections_drop_broken
from qorven.runtime.log_context import log_person
from qorven.runtime.prepared_read import PreparedRead
from qorven.runtime.publish import publish_or_hold, tasks_publish
from sessions_app.channel_kinds import CHAT_FAMILY
from sessions_app.models import Session
from sessions_app.selectors import message_by_external_id
from sessions_app.services import session_resolve
from tenancy.access import surface_access, surface_trust, tenant_serving
from tenancy.models import Tenant
from tenancy.switches import channel_enabled, channel_enabled_cached
from tenancy.trust import Trust

from .adapters import adapter_for
from .delivery import origin_note
from .event_insert import events_insert
from .inbound import InboundImage, InboundMessage
from .models import ChannelBinding, Identity, InboundEvent
from .pairing import identity_get_or_create
from .selectors import paired_sender
from .services import group_chat_migrate
from .strangers import former_member_answer, stranger_told, unknown_sender_answer, wait_end

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


def _waiting(**filters: Any) -> QuerySet[InboundEvent]:
    """Events still to be processed (or in a task's hands), oldest first."""
    return InboundEvent.objects.filter(
        state__in=[InboundEvent.State.PENDING, InboundEvent.State.PROCESSING], **filters).order_by("pk")


# Read for every platform message (compiled once: qorven.runtime.prepared_read). The
# event comes with its sender's oldest event still waiting (`head_id`; itself, usually).
_event_for_task: PreparedRead[InboundEvent] = PreparedRead(
    lambda tenant_id, event_id: InboundEvent.objects.select_related("binding__tenant", "binding__qor").filter(
        tenant_id=tenant_id, pk=event_id
    ).annotate(head_id=Subquery(_waiting(
        tenant_id=OuterRef("tenant_id"), binding_id=OuterRef("binding_id"), sender_id=OuterRef("sender_id"),
        pk__lte=OuterRef("pk")).values("pk")[:1])).order_by()[:1],
    tenant_id=int, event_id=int,
)
_oldest_waiting: PreparedRead[InboundEvent] = PreparedRead(
    lambda tenant_id, binding_id, sender_id, event_id: _waiting(
        tenant_id=tenant_id, binding_id=binding_id, sender_id=sender_id, pk__lte=event_id)[:1],
    tenant_id=int, binding_id=int, sender_id=str, event_id=int,
)


def inbound_event(*, tenant_id: int, event_id: int) -> InboundEvent | None:
    """A stored event of the tenant with its binding, the binding's tenant and Qor."""
    return _event_for_task.first(tenant_id=tenant_id, event_id=event_id)


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
            event.refresh_from_db(fields=["state", "result"])
            return event.result
        if head.state == InboundEvent.State.PROCESSING and head.updated_at > stale and head.pk != reclaim:
            raise InboundBusy(head.pk)
        claimed = InboundEvent.objects.filter(pk=head.pk, state=head.state, updated_at=head.updated_at).update(
            state=InboundEvent.State.PROCESSING, updated_at=timezone.now()
        )
        if not claimed:
            continue  # another task took it a moment ago: look again
        head.binding = event.binding
        try:
            result = _process_event(head)
        except DATABASE_DOWN as exc:
            if not _claim_give_back(head):
                exc.claimed_event = head.pk  # type: ignore[union-attr]
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
        InboundEvent.objects.filter(pk=event.pk, state=InboundEvent.State.PROCESSING).update(
            state=InboundEvent.State.PENDING, updated_at=timezone.now())
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
            result = _process(event.binding, message, event)
        except DATABASE_DOWN:
            raise  # the connection was lost, not the message (see inbound_process)
        except Exception as exc:
            logger.exception("inbound event %s could not be processed", event.pk)
            InboundEvent.objects.filter(pk=event.pk).update(
                state=InboundEvent.State.FAILED, result="error", error=f"{type(exc).__name__}: {exc}"[:2000],
                updated_at=timezone.now(),
            )
            return "error"
    # The message lives in the conversation from here on (or was never to be kept: an
    # unknown sender's): the event keeps only what recognises a platform's retry of it.
    InboundEvent.objects.filter(pk=event.pk).update(state=InboundEvent.State.DONE, result=result, payload={},
                                                    updated_at=timezone.now())
    return result


def _process(binding: ChannelBinding, message: InboundMessage, event: InboundEvent) -> str:
    tenant, qor = binding.tenant, binding.qor
    # Read fresh here: a webhook may have accepted this from a server whose cached binding
    # or switch (qorven.runtime.row_cache) had not yet seen it turned off.
    if not binding.enabled or not channel_enabled(tenant=tenant, channel=binding.kind):
        wait_end(binding, message)  # nothing is said on it: nor is an /ask left thinking
        return "switched-off"
    if message.extra.get("migrated_from"):  # the group chat has a new id: its conversation follows
        group_chat_migrate(binding=binding, channel=message.channel, old_chat=str(message.extra["migrated_from"]),
                           new_chat=message.thread_id)
        return "group-migrated"
    scope = f"{binding.kind}:{binding.pk}"
    if not message.sender_name:
        message = message.model_copy(update={"sender_name": _display_name(binding, message.sender_id)})
    meta = {"binding": binding.pk, "reply_target": message.reply_target, "sender_id": message.sender_id}
    if not tenant_serving(tenant):
        return _suspended_keep(binding, message, meta, scope)
    if message.group:
        adapter = adapter_for(binding.kind)
        message = adapter.settle(binding, message) if adapter is not None else message
        session = session_resolve(tenant=tenant, qor=qor, channel=message.channel, thread_id=message.thread_id,
                                  group=True)
        member = _group_member(tenant, binding, message.sender_id)
        if member is not None:  # a paired member: the group's digests are written for them too
            meta["user_id"] = member
        # Anyone can make a group and add the bot: unless the binding answers anyone there,
        # a stranger's mention is the group's context, like chatter, and never a model call
        # (nor a pairing code posted for the whole group to read).
        heeded = member is not None or binding.group_answers == ChannelBinding.GroupAnswers.ANYONE
        answered = message.addressed and heeded
        if message.extra.get("edit_of") and not (answered and _edit_asks(session, scope, message)):
            return "edit-ignored"
        if not answered:
            meta["no_reply"] = True  # kept for context; the Qor answers only when addressed
        if heeded:
            images, meta = _images(binding, message, meta)
        else:  # a stranger's files are never fetched nor kept: the model is told one was sent
            images, meta = [], _strangers_media(message, meta)
        inbound_accept(
            session=session, content=message.text, channel=message.channel, sender_name=message.sender_name,
            trust=Trust.PUBLIC, external_scope=scope, external_id=message.external_id, metadata=meta,
            images=images, transcribe=heeded,  # transcribing is a model call too
        )
        if answered:
            return "group"
        if not message.addressed:
            return "group-context"
        stranger_told(binding, message)
        return "group-unpaired"

    identity = identity_get_or_create(
        tenant=tenant, channel=binding.kind, external_id=message.sender_id, display_name=message.sender_name
    )
    if identity.approval != Identity.Approval.APPROVED or identity.user_id is None:
        return unknown_sender_answer(binding, identity, message)
    adapter = adapter_for(binding.kind)
    lasting = adapter is None or adapter.target_lasts(message.reply_target)
    if identity.reply_target != message.reply_target and message.reply_target and lasting:
        Identity.objects.filter(pk=identity.pk).update(reply_target=message.reply_target)
    user = identity.user
    trust = surface_access(tenant=tenant, user=user, surface=binding.kind, proven=message.sender_proven,
                           cap=identity.trust_level)
    if trust is None:  # removed from the workspace, or deactivated
        return former_member_answer(binding, identity, message)
    if message.channel in CHAT_FAMILY:
        session = session_resolve(tenant=tenant, qor=qor, channel=message.channel, user=user,
                                  sender_id=message.sender_id)
    else:  # email threads, sms numbers
        session = session_resolve(tenant=tenant, qor=qor, channel=message.channel, user=user,
                                  thread_id=message.thread_id or message.sender_id)
    images, meta = _images(binding, message, meta)
    # Voice notes are transcribed once stored (qorven.agent.voice), as on every surface.
    result = inbound_accept(
        session=session, content=message.text, channel=message.channel,
        sender_name=message.sender_name or identity.display_name, user=user, trust=trust,
        external_scope=scope, external_id=message.external_id, metadata=meta, images=images,
    )
    if result.created:
        origin_note(message=result.message, binding=binding, reply_target=message.reply_target,
                    sender_id=message.sender_id)
    return "accepted" if result.created else "duplicate"


def _suspended_keep(binding: ChannelBinding, message: InboundMessage, meta: dict, scope: str) -> str:
    """A message to a workspace the host has suspended: kept where it would have gone — a
    group's in its group chat, a paired member's in their conversation, with what it
    carried — and never answered: no model call (nor a transcription), no command run, no
    pairing code, nothing said to the sender, so nothing is lost and nothing is spent.
    Resuming the workspace does not answer it after the fact. A stranger's message is not
    kept, as it never is; an edit in a group is not either."""
    tenant, qor = binding.tenant, binding.qor
    meta = {**meta, "no_reply": True, "suspended": True}
    user, trust, name = None, Trust.PUBLIC, message.sender_name
    if message.group:
        if message.extra.get("edit_of"):
            return "suspended"
        session = session_resolve(tenant=tenant, qor=qor, channel=message.channel, thread_id=message.thread_id,
                                  group=True)
        member = _group_member(tenant, binding, message.sender_id)
        if member is not None:
            meta["user_id"] = member
        kept = member is not None or binding.group_answers == ChannelBinding.GroupAnswers.ANYONE
    else:
        sender = paired_sender(tenant=tenant, channel=binding.kind, external_id=message.sender_id)
        if sender is None or sender.member_role is None:  # type: ignore[attr-defined]
            wait_end(binding, message)
            return "suspended"
        user, name = sender.user, message.sender_name or sender.display_name
        # The trust it would have carried: what it says stays marked as whose it is.
        trust = surface_trust(role=sender.member_role, surface=binding.kind,  # type: ignore[attr-defined]
                              proven=message.sender_proven, cap=sender.trust_level)
        session = session_resolve(tenant=tenant, qor=qor, channel=message.channel, user=user,
                                  **({"sender_id": message.sender_id} if message.channel in CHAT_FAMILY
                                     else {"thread_id": message.thread_id or message.sender_id}))
        kept = True
    images, meta = _images(binding, message, meta) if kept else ([], _strangers_media(message, meta))
    inbound_accept(
        session=session, content=message.text, channel=message.channel, sender_name=name,
        user=user, trust=trust, external_scope=scope, external_id=message.external_id, metadata=meta,
        images=images, transcribe=False,
    )
    wait_end(binding, message)
    return "suspended"


def _edit_asks(session: Session, scope: str, message: InboundMessage) -> bool:
    """Whether an edit that now mentions the bot asks a question: the message it edits is
    in this group and was kept unanswered. One answered (or waiting for its answer) is
    never answered again; one never stored (a sticker's edit) is not asked about either."""
    original = message_by_external_id(session=session, scope=scope, external_id=str(message.extra["edit_of"]))
    return original is not None and bool((original.metadata or {}).get("no_reply"))


def _group_member(tenant: Tenant, binding: ChannelBinding, sender_id: str) -> int | None:
    """The user a group message's sender is paired to, if they are a member of the tenant
    now; None for a stranger, and for one whose person has left the workspace (their
    pairing stays, for when they are let back)."""
    sender = paired_sender(tenant=tenant, channel=binding.kind, external_id=sender_id)
    if sender is None or sender.member_role is None:  # type: ignore[attr-defined]
        return None
    return sender.user_id


NAME_TTL = 24 * 3600  # a sender's looked-up name is asked for again after a day


def _display_name(binding: ChannelBinding, sender_id: str) -> str:
    """The name of a sender whose platform sent only an id (Slack), from the cache or the
    platform's API; "" when it cannot be had (the message counts without it)."""
    adapter = adapter_for(binding.kind)
    if adapter is None or not sender_id:
        return ""
    key = f"sender-name:{binding.pk}:{sender_id}"
    name = cache.get(key)
    if name is None:
        name = adapter.display_name(binding, sender_id)
        cache.set(key, name, NAME_TTL if name else 300)  # an unknown name is tried again soon
    return name


def _images(binding: ChannelBinding, message: InboundMessage, meta: dict) -> tuple[list[InboundImage], dict]:
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


def _strangers_media(message: InboundMessage, meta: dict) -> dict:
    """`meta` of a group message from someone the binding does not answer, its
    attachments counted as `left_out` and none fetched: the host takes no files from people
    it never agreed to serve, and the model, shown the message as the group's context, is
    told an attachment was sent and not kept (qorven.agent.attachments)."""
    sent = message.left_out + len(message.media) + len(message.images)
    return {**meta, "left_out": sent, "left_out_why": "unpaired"} if sent else meta
