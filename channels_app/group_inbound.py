"""A message in a group chat (a Telegram group or forum topic, a Slack channel, a Discord
server channel): kept in the group's one session for everyone in it, and answered only when
it addresses the Qor and comes from someone the binding answers there."""
from __future__ import annotations

from functools import partial

from django.db import transaction

from qorven.agent.gateway import inbound_accept, turn_enqueue
from qorven.runtime.publisher import broadcast_soon
from sessions_app.edits import message_edit_ask
from sessions_app.models import Message, Session
from sessions_app.selectors import message_by_external_id
from sessions_app.services.resolve import session_resolve
from tenancy.models import Tenant
from tenancy.slash_registry import command_parse
from tenancy.trust import Trust

from .adapters import adapter_for
from .event_done import event_result_if_stored
from .inbound import InboundMessage
from .inbound_media import inbound_images, strangers_media
from .models import ChannelBinding
from .selectors import paired_sender
from .strangers import stranger_told, stranger_waits


def group_message_handle(binding: ChannelBinding, message: InboundMessage) -> str:
    """Store a group's message in the group's session; queue its answer when it is one to
    answer. The event's result: "group" (to be answered), "group-context" (chatter),
    "group-unpaired" (a stranger's mention, kept unanswered), "edit-ignored"."""
    tenant, qor = binding.tenant, binding.qor
    scope = f"{binding.kind}:{binding.pk}"  # what its message ids are unique within
    adapter = adapter_for(binding.kind)
    message = adapter.settle(binding, message) if adapter is not None else message
    meta = {"binding": binding.pk, "reply_target": message.reply_target, "sender_id": message.sender_id}
    session = session_resolve(tenant=tenant, qor=qor, channel=message.channel, thread_id=message.thread_id,
                              group=True)
    if session.external_thread_id != message.thread_id:  # the platform moved the chat: what is said follows it
        moved = {"thread_id": session.external_thread_id}
        if message.reply_target == message.thread_id:
            moved["reply_target"] = meta["reply_target"] = session.external_thread_id
        message = message.model_copy(update=moved)
    member = group_member(tenant, binding, message.sender_id)
    if member is not None:  # a paired member: the group's digests are written for them too
        meta["user_id"] = member
    # Anyone can make a group and add the bot: unless the binding answers anyone there,
    # a stranger's mention is the group's context, like chatter, and never a model call
    # (nor a pairing code posted for the whole group to read).
    heeded = member is not None or binding.group_answers == ChannelBinding.GroupAnswers.ANYONE
    answered = message.addressed and heeded
    if message.extra.get("edit_of"):
        # An edit asks where it makes a message kept unanswered address the Qor: that
        # message, as edited. One answered (or waiting for its answer) is never answered
        # again; one never stored (a sticker's edit) is not asked about either.
        original = message_by_external_id(session=session, scope=scope, external_id=str(message.extra["edit_of"])
                                          ) if answered else None
        if original is None or not (original.metadata or {}).get("no_reply"):
            return "edit-ignored"
        if not command_parse(message.text):
            return _edit_ask(session, original, message.text, meta)
        # A command edited in is answered as one, on its own, as it would have been.
    if not answered:
        meta["no_reply"] = True  # kept for context; the Qor answers only when addressed
    if heeded:
        images, meta = inbound_images(binding, message, meta)
    else:  # a stranger's files are never fetched nor kept: the model is told one was sent
        images, meta = [], strangers_media(message, meta)
    result = "group" if answered else "group-context" if not message.addressed else "group-unpaired"
    told = result == "group-unpaired" and stranger_waits(binding, message)
    if not told:  # a stranger who waits is told after: the event is done once they are
        event_result_if_stored(result, external_scope=scope, external_id=message.external_id)
    inbound_accept(
        session=session, content=message.text, channel=message.channel, sender_name=message.sender_name,
        trust=Trust.PUBLIC, external_scope=scope, external_id=message.external_id, metadata=meta,
        images=images, transcribe=heeded,  # transcribing is a model call too
    )
    if told:
        stranger_told(binding, message)
    return result


def _edit_ask(session: Session, original: Message, text: str, meta: dict) -> str:
    """`original`, edited to address the Qor, waits for its answer as edited, in its place."""
    if not message_edit_ask(message=original, content=text, metadata=meta):
        return "edit-ignored"  # taken by another task, or its session closed meanwhile
    turn_enqueue(session=session)
    event = {"type": "message.answer", "seq": original.seq, "answer_state": Message.Answer.PENDING}
    transaction.on_commit(partial(broadcast_soon, session.pk, event))
    return "group"


def group_member(tenant: Tenant, binding: ChannelBinding, sender_id: str) -> int | None:
    """The user a group message's sender is paired to, if they are a member of the tenant
    now; None for a stranger, and for one whose person has left the workspace (their
    pairing stays, for when they are let back)."""
    sender = paired_sender(tenant=tenant, channel=binding.kind, external_id=sender_id)
    if sender is None or sender.member_role is None:  # type: ignore[attr-defined]
        return None
    return sender.user_id
