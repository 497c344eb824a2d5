"""Where an inbound user message enters the agent: store it, then queue the turn."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from qorven.runtime.publish import publish_again_later
from qorven.runtime.task_scope import collecting
from sessions_app.errors import SessionClosed
from sessions_app.models import Message, Session
from sessions_app.selectors import session_successor
from sessions_app.attachments import ImageBytes, attachments_meta, images_attach
from sessions_app.services.append import AppendResult, message_append

from .notices import VOICE_NOTICES

logger = logging.getLogger(__name__)


# Turns queued inside `turns_here()`: (tenant id, session id), in the order queued.
_here: ContextVar[list[tuple[int, int]] | None] = ContextVar("qorven_turns_here", default=None)


def turn_enqueue(*, session: Session) -> None:
    """Queue a turn for the session once the current transaction commits (inside
    `turns_here()`, hand it to the block's owner instead)."""
    from .tasks import agent_turn

    key = (session.tenant_id, session.pk)
    here = _here.get()
    if here is not None:
        transaction.on_commit(lambda: here.append(key) if key not in here else None)
        return
    transaction.on_commit(lambda: _queue(agent_turn, key))


def _queue(task: Any, key: tuple[int, int]) -> None:
    """Queue the turn; one a broker refused (down, restarting) is tried again every second
    (qorven.runtime.publish.publish_again_later), so the message is answered as soon as the
    broker is back, and past that the stored message waits for the sweeper
    (channels_app.sweep): the caller's work — a message taken — stands."""
    try:
        task.delay(*key)
    except Exception as exc:
        logger.warning("could not queue the turn of session %s (%s); tried again as the broker comes back",
                       key[1], type(exc).__name__)
        publish_again_later(task, key)


def turns_here() -> AbstractContextManager[list[tuple[int, int]]]:
    """Collect the turns queued in the block (once their messages are committed) instead
    of sending them to the broker: the task that stored a message runs its turn itself
    (qorven.agent.tasks.turns_run), one hop less between a message and its answer."""
    return collecting(_here)


def inbound_accept(
    *,
    session: Session,
    content: str,
    channel: str,
    sender_name: str,
    trust: str,
    user: User | None = None,
    external_scope: str = "",
    external_id: str = "",
    metadata: dict[str, Any] | None = None,
    images: Sequence[ImageBytes] = (),
    transcribe: bool = True,
) -> AppendResult:
    """Store the user's message first (nothing is lost if anything after fails), with its
    `images` in the same transaction, then queue the turn that answers it. A re-delivered
    message is neither stored nor answered twice. Not `transcribe`: its voice notes are
    kept as they are, never sent to the transcriber (a stranger's, in a group)."""
    from tenancy.slash_registry import CommandContext, CommandReply, command_parse

    from .voice import has_voice, voice_intake

    heard: dict[str, Any] = {}
    voice_notice = ""
    if has_voice(images):  # transcribed once stored (qorven.agent.voice), or one notice of ours
        content, heard, voice_notice = voice_intake(qor=session.qor, text=content, transcribe=transcribe)
    # Commands are answered right here; group chatter the Qor was not addressed in is kept
    # for context — a command there too, unless it names this Qor's bot (/status@aria_bot:
    # the adapter counts it as addressed): one for another bot is not ours to answer.
    # Anything else waits for the agent's answer — a voice note too, though
    # turns pass over it until its transcript is in (it waits as `pending`, where the
    # sweeper finds it if its transcription task was lost: channels_app.sweep).
    addressed = not (metadata or {}).get("no_reply")
    parsed = command_parse(content) if not heard and addressed else None
    extra = {"trust": trust, **({"command": parsed[0].name} if parsed else {}),
             **({"attachments": attachments_meta(images)} if images else {}), **heard}
    voice_waits = heard.get("voice") == "pending"
    awaits_answer = parsed is None and addressed and (not heard or voice_waits)
    # A message alone is one statement, a transaction of its own (sessions_app.append_statement):
    # what is written with it — images, a command's answer — shares a transaction with it.
    alone = not images and parsed is None
    with nullcontext() if alone else transaction.atomic():
        for attempt in range(2):
            try:
                result = message_append(
                    session=session, role=Message.Role.USER, content=content, channel=channel,
                    sender_name=sender_name, external_scope=external_scope, external_id=external_id,
                    metadata={**(metadata or {}), **extra}, awaits_answer=awaits_answer,
                )
                break
            except SessionClosed:
                # Rotated (/clear, /compact) between resolving the session and this append.
                successor = session_successor(session=session) if attempt == 0 else None
                if successor is None:
                    raise
                session = successor
        if not result.created:
            return result
        images_attach(message=result.message, images=images)
        if heard.get("voice") == "pending":
            transcribe_soon(result.message)
        elif voice_notice and addressed:  # answered here, with one notice of ours: no model call
            message_append(session=result.message.session, role=Message.Role.SYSTEM,
                           content=VOICE_NOTICES[voice_notice], channel=channel, sender_name=session.qor.name,
                           metadata={"notice": voice_notice, "reply_to": result.message.seq})
        if parsed is None:
            if awaits_answer and not voice_waits:  # a voice note's turn is queued with its transcript
                turn_enqueue(session=session)
            return result
        entry, args = parsed
        answer = entry.handler(CommandContext(session=session, channel=channel, args=args, trust=trust,
                                                sender_id=str((metadata or {}).get("sender_id") or "")))
        reply_meta: dict[str, Any] = {"notice": "command", "command": entry.name, "reply_to": result.message.seq}
        target = session
        if isinstance(answer, CommandReply):
            target, answer = answer.session, answer.text
            if target.pk != session.pk:
                # reply_to names a seq of the session it is in; this one answers from another.
                del reply_meta["reply_to"]
                reply_meta["command_message"] = {"session": session.pk, "seq": result.message.seq}
        message_append(
            session=target, role=Message.Role.ASSISTANT, content=answer, channel=channel,
            sender_name=session.qor.name, metadata=reply_meta,
        )
    return result


def transcribe_soon(message: Message) -> None:
    """Transcribe the voice note once what stored it is committed (qorven.agent.voice)."""
    from .tasks import voice_transcribe_task

    tenant_id, message_id = message.tenant_id, message.pk
    transaction.on_commit(lambda: voice_transcribe_task.delay(tenant_id, message_id))


def reply_regenerate(*, session: Session, reply_to: int) -> bool:
    """Answer message `reply_to` again (the newest answered one): its old reply leaves the
    live surfaces at once and a new turn writes another. False when it cannot be."""
    from qorven.runtime.publisher import broadcast_soon
    from sessions_app.services.answers import reply_supersede

    with transaction.atomic():
        superseded = reply_supersede(session=session, reply_to=reply_to)
        if superseded is None:
            return False
        event = {"type": "message.regenerating", "reply_to": reply_to, "superseded": superseded}
        transaction.on_commit(lambda: broadcast_soon(session.pk, event))
        turn_enqueue(session=session)
    return True
