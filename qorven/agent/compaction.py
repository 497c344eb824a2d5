"""When a turn compacts its session, and how much (the agent's side of compaction).

The window decides: the messages not yet compacted are measured the way the prompt
builder measures them. memory_app does the condensing (memory_app.compaction).

- auto mode: after an exchange, once the uncompacted messages outgrow the window budget,
  the summarizer task condenses the oldest of them so that the newest half of the
  budget stays raw.
- manual mode: before a turn, once the estimated prompt reaches `compact_threshold ×
  num_ctx` (or when the provider says the prompt is too long), the session is compacted
  and rotated, and the turn goes on in the fresh session.
"""
from __future__ import annotations

import logging

from django.db import transaction

from memory_app.compaction import CompactionFailed, RotateOutcome, compaction_rotate, counted
from sessions_app.errors import SessionClosed
from sessions_app.context_reads import context_left_out
from sessions_app.models import Message, Session
from sessions_app.selectors import (
    StoredMessage,
    messages_read,
    next_pending_user_message,
)
from sessions_app.services.append import message_append

from .prompt import READ_BATCH, READ_BATCH_MAX, Prompt, message_tokens

logger = logging.getLogger(__name__)

# After an auto compaction, the raw messages left fill at most this share of the budget,
# so the summarizer runs once per half a window of conversation, not after every turn.
KEEP_FRACTION = 0.5
_BATCH = 64

ROTATED_NOTICE = (
    "This conversation was getting long for the model, so I saved its key points to memory and continued "
    "in a fresh session ({messages} summarized, {memories} saved)."
)
OVERFLOW_NOTICE = (
    "This conversation no longer fit the model's context, so I saved its key points to memory, continued "
    "in a fresh session and tried again ({messages} summarized, {memories} saved)."
)
IN_PLACE_NOTICE = (
    "This conversation was getting long for the model, so I saved its key points to memory and condensed "
    "the earlier messages ({messages} summarized, {memories} saved)."
)
FAILED_NOTICE = "I could not compact this conversation ({reason}); nothing was lost."


def _counts(message: StoredMessage) -> bool:
    meta = message.metadata if isinstance(message.metadata, dict) else {}
    return not (meta.get("notice") or meta.get("command"))


def _newest_first(session: Session):
    """The session's uncompacted messages that reach the model or the summarizer, newest
    first (read in doubling batches, as the prompt's window is): not the answers the
    person had written again, which reach neither."""
    before: int | None = None
    size = READ_BATCH
    while True:
        batch = messages_read(session=session, before_seq=before, limit=size, without_replaced=True)
        for message in reversed(batch):
            if message.seq <= session.compacted_through_seq:
                return
            if _counts(message):
                yield message
        if len(batch) < size:
            return
        before = batch[0].seq
        size = min(size * 2, READ_BATCH_MAX)


def fixed_tokens(prompt: Prompt) -> int:
    """What the prompt costs besides its messages: system text and tool schemas."""
    return prompt.estimated_tokens - prompt.window_tokens


def compaction_due(*, session: Session, prompt: Prompt, num_ctx: int, threshold: float) -> bool:
    """Manual mode: whether the whole uncompacted conversation plus the fixed part of the
    prompt reaches `threshold × num_ctx` (reading stops as soon as it does)."""
    limit = threshold * num_ctx
    total = fixed_tokens(prompt)
    for message in _newest_first(session):
        total += message_tokens(message)
        if total >= limit:
            return True
    return total >= limit


def auto_compaction_point(
    *, session: Session, budget: int, answered: tuple[Prompt, int] | None = None
) -> int | None:
    """Auto mode: the seq through which to compact, or None while everything fits.

    The newest messages filling KEEP_FRACTION of `budget` stay, starting at a user
    message so an exchange is never cut in half; never past a message still waiting for
    its answer.

    `answered`: the prompt an exchange was answered with and the seq of the message it
    answered. When that prompt's window read the whole uncompacted conversation, only
    what it left out is read to tell whether everything still fits (the usual case,
    one small query). When that window was full, the conversation is over the budget
    already (the window's messages and the one that did not fit are among those counted
    here, and the budget is the same): the newest messages, those that stay raw, are the
    window's and what it left out after its oldest message (one small query), and the
    conversation is read again only when those do not fill KEEP_FRACTION of the budget.
    """
    window_full = answered is not None and answered[0].history_tokens is None
    if answered is not None and not window_full and _still_fits(session, budget, *answered):
        return None
    keep_budget = int(budget * KEEP_FRACTION)
    kept: list[StoredMessage] | None = None
    over = False
    if answered is not None and window_full:
        newest = _newest_of_full_window(session, *answered)
        kept = _kept(newest, keep_budget, answered[0].costs) if newest is not None else None
        over = kept is not None
    if kept is None:
        total = 0
        kept = []
        for message in _newest_first(session):
            total += message_tokens(message)
            if total <= keep_budget:
                kept.append(message)
            elif window_full:  # nothing more is kept, and the rest is known to go over
                over = True
                break
            if total > budget:
                over = True
                break
    if not over or not kept:
        return None
    # kept is newest first; start the raw part at its oldest user message.
    starts = [m for m in kept if m.role == Message.Role.USER]
    first_kept = starts[-1] if starts else kept[-1]
    point = first_kept.seq - 1
    pending = next_pending_user_message(session=session)
    if pending is not None:
        point = min(point, pending.seq - 1)
    return point if point > session.compacted_through_seq else None


def _newest_of_full_window(session: Session, prompt: Prompt, answering_seq: int) -> list[StoredMessage] | None:
    """The counted messages from the oldest one of a full window on, newest first: the
    window's, and what its read leaves out (failed, superseded, later; one read). None
    when more was left out than one read takes."""
    if not prompt.window:
        return None
    oldest = min(m.seq for m in prompt.window)
    rest = context_left_out(session=session, floor_seq=oldest - 1, answering_seq=answering_seq, limit=_BATCH)
    if len(rest) >= _BATCH:
        return None
    held = {m.seq for m in prompt.window}
    return sorted([*prompt.window, *(m for m in rest if m.seq not in held)], key=lambda m: m.seq, reverse=True)


def _kept(newest: list[StoredMessage], keep_budget: int, costs: dict[int, int]) -> list[StoredMessage] | None:
    """The first of `newest` that fit `keep_budget`; None when all of them do (older
    messages might fit too). `costs`: the tokens of those the prompt's window counted."""
    total = 0
    for i, message in enumerate(newest):
        cost = costs.get(message.seq)
        total += cost if cost is not None else message_tokens(message)
        if total > keep_budget:
            return newest[:i]
    return None


def _still_fits(session: Session, budget: int, prompt: Prompt, answering_seq: int) -> bool:
    if prompt.history_tokens is None:
        return False  # the window was full: the conversation outgrew the budget
    rest = context_left_out(session=session, floor_seq=session.compacted_through_seq, answering_seq=answering_seq,
                            limit=_BATCH)
    # Counted at most twice (a later message the window also read), never left out.
    return len(rest) < _BATCH and prompt.history_tokens + sum(message_tokens(m) for m in rest) <= budget


def summarizer_queue(*, session: Session, through_seq: int) -> None:
    """Queue the summarizer sub-agent for the session, after the current transaction (it
    runs once the conversation is quiet: memory_app.tasks.summarize_soon)."""
    from memory_app.tasks import summarize_soon

    tenant_id, session_id = session.tenant_id, session.pk
    transaction.on_commit(lambda: summarize_soon(tenant_id=tenant_id, session_id=session_id, through_seq=through_seq))


def compact_for_turn(*, session: Session, pending: Message, overflow: bool) -> RotateOutcome | None:
    """Manual mode: compact and rotate before answering `pending`, with a one-line notice
    on its surface in the fresh session. None when nothing was compacted (nothing to
    condense, or the summarizer failed: then a notice says so and the turn goes on)."""
    try:
        outcome = compaction_rotate(session=session)
    except (CompactionFailed, SessionClosed) as exc:
        logger.warning("could not compact session %s: %s", session.pk, exc)
        message_append(
            session=session, role=Message.Role.SYSTEM, content=FAILED_NOTICE.format(reason=_reason(exc)),
            channel=pending.channel, metadata={"notice": "compact_failed", "reply_to": pending.seq},
        )
        return None
    if outcome is None:
        return None
    if outcome.rotated:
        carried = next(
            (m for m in outcome.carried if (m.metadata.get("carried_from") or {}).get("seq") == pending.seq), None
        )
        template = OVERFLOW_NOTICE if overflow else ROTATED_NOTICE
    else:
        carried, template = pending, IN_PLACE_NOTICE
    text = template.format(messages=counted(outcome.messages, "message"), memories=counted(outcome.memories, "note"))
    metadata: dict[str, object] = {"notice": "compacted"}
    if carried is not None:
        metadata["reply_to"] = carried.seq
    message_append(session=outcome.session, role=Message.Role.SYSTEM, content=text, channel=pending.channel,
                   metadata=metadata)
    return outcome


def _reason(exc: Exception) -> str:
    """What a person may read of why compaction failed: our words, never the provider's."""
    return getattr(exc, "reason", "") or "the conversation changed while it was being compacted"
