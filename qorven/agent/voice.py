"""Voice notes: what a person said becomes the text of their message, through the Qor's
transcriber route (qorven.llm); the audio stays attached to the message.

A message with audio is stored at once (`voice: pending`, the typed text or "[voice note]"
as its content), on every surface alike — a platform's DM or group, the chat page, the
webchat — and transcribed by a task (qorven.agent.tasks.voice_transcribe_task), never in a
request: the transcript becomes its content (`voice: transcript`) and, when the Qor was
addressed, it waits for its answer like text. A transcriber that is down for a while is
tried again later; one that refuses, or is still down after QORVEN_VOICE_RETRIES more
tries, leaves the message `voice: failed` with one notice of ours and no model call. Group
chatter the Qor was not addressed in is transcribed too, as context, and never answered.
"""
from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

from django.db import transaction

from qorven.llm import ModelError, ModelRefused
from qorven.llm.routes import transcribe, transcriber_route
from sessions_app.errors import WorkspaceSuspended
from sessions_app.models import Image, Message, Session
from sessions_app.selectors import carried_copy
from sessions_app.services.answers import message_answer_fail, message_transcribed
from sessions_app.services.append import message_append
from tenancy.access import tenant_serving
from tenancy.models import Qor

from .notices import VOICE_NOTICES

logger = logging.getLogger(__name__)

PLACEHOLDER = "[voice note]"


class Attachment(Protocol):
    mime_type: str


class TranscribeLater(Exception):
    """The transcriber could not answer now; the note is tried again after `after` s (or
    the task's own backoff when None)."""

    def __init__(self, after: float | None) -> None:
        super().__init__(after)
        self.after = after


def has_voice(attachments: Sequence[Attachment]) -> bool:
    return any(a.mime_type.startswith("audio/") for a in attachments)


def voice_intake(*, qor: Qor, text: str, transcribe: bool = True) -> tuple[str, dict[str, Any], str]:
    """(content, metadata, notice) of a message arriving with voice notes: with a
    transcriber, the text so far and `voice: pending` (a task transcribes it once it is
    stored); without one, `voice: not transcribed` and the notice key
    (qorven.agent.notices.VOICE_NOTICES) of the one reply of ours. Not `transcribe`:
    `voice: not transcribed`, and nothing to say."""
    if not transcribe:
        return text or PLACEHOLDER, {"voice": "not transcribed"}, ""
    if transcriber_route(qor) is None:
        return text or PLACEHOLDER, {"voice": "not transcribed"}, "voice_off"
    return text or PLACEHOLDER, {"voice": "pending"}, ""


def voice_transcribe(*, tenant_id: int, message_id: int, last_try: bool) -> str:
    """Transcribe the voice notes of a stored message still `voice: pending`, and settle it:
    "transcript", "failed", or "skipped" (already settled, or gone). Raises
    TranscribeLater on a transient failure unless this is the `last_try`. Safe to run
    twice: the message is settled once.

    "suspended": the host suspended the workspace since the note came. It is not sent to
    the transcriber, and it ends as a text message waiting for its turn then does
    (qorven.agent.turn_answer): not answered, nothing said, "the workspace is suspended"
    for the admin, and not answered after the fact once the workspace is resumed. It stays
    `voice: pending`, so /retry after resume hears it and answers it."""
    message = (Message.objects.select_related("session__qor", "tenant")
               .filter(tenant_id=tenant_id, pk=message_id).first())
    if message is None or (message.metadata or {}).get("voice") != "pending":
        return "skipped"
    if not tenant_serving(message.tenant):
        _suspended_end(message)
        return "suspended"
    qor = message.session.qor
    audio = list(Image.objects.filter(message=message, mime_type__startswith="audio/").order_by("id")
                 .values_list("mime_type", "data"))
    try:
        route = transcriber_route(qor)
        if route is None:  # switched off since the note arrived
            raise ModelRefused("no transcriber model", kind="misconfigured")
        heard = [transcribe(route, audio=base64.b64decode(data), mime_type=mime) for mime, data in audio]
    except ModelError as exc:
        logger.warning("a voice note for qor %s could not be transcribed (%s): %s", qor.pk, exc.kind, exc.detail)
        if exc.transient and not last_try:
            raise TranscribeLater(exc.retry_after) from None
        return _settle(message, qor=qor, transcript="")
    return _settle(message, qor=qor, transcript=_bounded(" ".join(t for t in heard if t)))


def _suspended_end(message: Message) -> None:
    """The note waited for its transcript as the host suspended the workspace: if it was
    waiting for an answer, it ends unanswered (told nobody), shown so."""
    from qorven.runtime.publisher import broadcast_soon

    if message.answer_state != Message.Answer.PENDING:
        return
    logger.info("voice note %s of session %s not answered: %s", message.seq, message.session_id,
                WorkspaceSuspended.reason)
    with transaction.atomic():
        message_answer_fail(message=message, error=WorkspaceSuspended.reason, told=False)
        event = {"type": "message.answer", "seq": message.seq, "answer_state": Message.Answer.FAILED}
        transaction.on_commit(partial(broadcast_soon, message.session_id, event))


# Far past any voice note (two hours of speech): a transcription server answering more (a
# loop, a wrong endpoint) would have it all stored as the person's message, and sent to the
# model with every turn after.
MAX_TRANSCRIPT_CHARS = 100_000


def _bounded(transcript: str) -> str:
    if len(transcript) <= MAX_TRANSCRIPT_CHARS:
        return transcript
    logger.warning("a transcript of %d characters was cut to %d", len(transcript), MAX_TRANSCRIPT_CHARS)
    return transcript[: MAX_TRANSCRIPT_CHARS - 1] + "…"


def _settle(message: Message, *, qor: Qor, transcript: str) -> str:
    """Settle the note with its transcript (or as failed) and answer it, once. A note that
    was carried into a fresh session while it waited (/compact, manual compaction) is
    settled there too, and answered there: the copy is what the fresh session's turns see."""
    from qorven.runtime.publisher import broadcast_soon

    from .gateway import turn_enqueue

    outcome = "skipped"
    with transaction.atomic():
        pk: int | None = message.pk
        while pk is not None:
            fresh = _locked(pk)
            metadata = dict(fresh.metadata or {}) if fresh is not None else {}
            if fresh is None or metadata.get("voice") != "pending":
                break  # another run settled it (here, or the copy it was carried into)
            session = fresh.session
            addressed = not metadata.get("no_reply")
            text = "" if fresh.content == PLACEHOLDER else fresh.content
            settled = "transcript" if transcript else "failed"
            outcome = outcome if outcome != "skipped" else settled
            content = (f"{text}\n{transcript}" if text else transcript) if transcript else fresh.content
            message_transcribed(message=fresh, content=content, metadata={**metadata, "voice": settled},
                                awaits_answer=addressed and bool(transcript))
            events = [{"type": "message.transcribed", "seq": fresh.seq, "content": content, "voice": settled}]
            pk = None
            if session.state != Session.State.ACTIVE:
                pk = carried_copy(message=fresh)  # answered where it was carried, if it was
            elif addressed and transcript:
                turn_enqueue(session=session)
                events.append({"type": "message.answer", "seq": fresh.seq, "answer_state": "pending"})
            elif addressed:  # one notice of ours, no model call
                message_append(session=session, role=Message.Role.SYSTEM, content=VOICE_NOTICES["voice_failed"],
                               channel=fresh.channel, sender_name=qor.name,
                               metadata={"notice": "voice_failed", "reply_to": fresh.seq})
            transaction.on_commit(partial(_publish, broadcast_soon, session.pk, events))
    return outcome


def _publish(broadcast: Callable[[int, dict[str, Any]], None], session_id: int, events: list[dict[str, Any]]) -> None:
    for event in events:
        broadcast(session_id, event)


def _locked(pk: int) -> Message | None:
    """The message, its session's row locked first (as an append and a rotation lock it,
    so a rotation carries the note either settled or still waiting, never half way), then
    its own row."""
    session_id = Message.objects.filter(pk=pk).values_list("session_id", flat=True).first()
    if session_id is None:
        return None
    Session.objects.select_for_update().filter(pk=session_id).values_list("pk", flat=True).first()
    return Message.objects.select_for_update(of=("self",)).select_related("session").filter(pk=pk).first()
