"""A platform message its sender edited (Telegram's `edited_message`): the conversation
keeps the message once, as it now reads, where it was written."""
from __future__ import annotations

from typing import Any

from django.db import transaction

from .models import Message, Session


@transaction.atomic
def message_edit_ask(*, message: Message, content: str, metadata: dict[str, Any]) -> bool:
    """A group message kept unanswered (`no_reply`), edited by its sender to address the
    Qor: its text becomes the edit's — the text it was written with kept as `edited_from`,
    for the admin — with `metadata` over what it had, and it waits for its answer in its
    place in the conversation (a turn answers it: the caller queues one). What every
    surface, the search and the model's window read is then the message once, as edited.
    Once: an edit another task took first, a message since answered or waiting, or one of
    a session no longer active changes nothing (False)."""
    # The session's row first, as an append locks it: a rotation takes the message either
    # as it was or as edited, never half way.
    if not Session.objects.select_for_update().filter(pk=message.session_id, state=Session.State.ACTIVE).exists():
        return False
    before = dict(message.metadata or {})
    if not before.get("no_reply"):
        return False
    edited = {key: value for key, value in {**before, **metadata}.items() if key != "no_reply"}
    edited.setdefault("edited_from", message.content)
    same_row = Message.objects.filter(pk=message.pk, answer_state__isnull=True)
    same_row = same_row.filter(revision=message.revision) if message.revision is not None else same_row.filter(
        revision__isnull=True)  # moved on by every update (a trigger): nobody changed it since it was read
    if not same_row.update(content=content, metadata=edited, answer_state=Message.Answer.PENDING,
                           answer_attempts=0):
        return False
    message.content, message.metadata, message.answer_state = content, edited, Message.Answer.PENDING
    return True
