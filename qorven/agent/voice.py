"""Voice notes: what a person said becomes the text of their message, through the Qor's
transcriber route (qorven.llm); the audio stays attached to the message."""
from __future__ import annotations

import base64
import logging
from typing import Any, Protocol

from qorven.llm import ModelError
from qorven.llm.routes import transcribe, transcriber_route
from tenancy.models import Qor

logger = logging.getLogger(__name__)


class Attachment(Protocol):
    mime_type: str
    data: str  # base64
    size: int


def voice_heard(*, qor: Qor, text: str, attachments: list[Attachment]) -> tuple[str, dict[str, Any], str]:
    """(content, metadata, notice) of a message that may hold voice notes (`audio/…`
    attachments): the transcript is the content (after any text sent with it), marked in
    the metadata. `notice` names the one reply of ours (qorven.agent.notices.VOICE_NOTICES)
    when the Qor has no transcriber, or the note could not be made out; the message is
    stored either way and, then, not sent to the model."""
    voices = [a for a in attachments if a.mime_type.startswith("audio/")]
    if not voices:
        return text, {}, ""
    route = transcriber_route(qor)
    if route is None:
        return text or "[voice note]", {"voice": "not transcribed"}, "voice_off"
    try:
        heard = [transcribe(route, audio=base64.b64decode(v.data), mime_type=v.mime_type) for v in voices]
    except ModelError as exc:
        logger.warning("a voice note for qor %s could not be transcribed (%s): %s", qor.pk, exc.kind, exc.detail)
        return text or "[voice note]", {"voice": "failed"}, "voice_failed"
    transcript = " ".join(t for t in heard if t)
    if not transcript:
        return text or "[voice note]", {"voice": "empty"}, "voice_failed"
    return (f"{text}\n{transcript}" if text else transcript), {"voice": "transcript"}, ""
