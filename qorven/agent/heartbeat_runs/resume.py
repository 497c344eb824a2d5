"""A run tried again goes on from where its earlier try stopped, as a turn does: the tool
calls that try made and their results are stored in the run's cron session (replying to
the beat's prompt stored there, `reply_to`), and the next try asks the model with them,
so no tool that ran (a memory saved, a message sent) runs again. A call whose result
was never stored (the worker died while it ran) is not run again either: the model reads
that it may or may not have taken effect (qorven.agent.loop.rounds_completed, shared with
turns). A try that stored the model's answer (replying to the prompt too) before it died
is finished from that answer: the model is not asked again, and an answer it delivered is
recorded as delivered, not delivered again (run.py).

A retry after the beat's prompt was edited finishes the run as it was asked: the tools
ran for the prompt stored in the run's session, so that prompt goes on being asked (and
fingerprinted, so a HEARTBEAT_OK does not mark the edited one as seen); the edited prompt
is asked from the next run on."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User

from heartbeats_app.models import Heartbeat, HeartbeatRun
from sessions_app.channel_kinds import Channel
from sessions_app.errors import SessionNotFound
from sessions_app.models import Message, Session
from sessions_app.selectors import messages_read, rounds_of, session_get
from sessions_app.services.lifecycle import session_reopen

from ..loop import rounds_completed
from ..prompt import to_openai


@dataclass
class EarlierTry:
    """What an earlier try of the run stored: its cron session, the prompt it was asked,
    and (once `go_on` opened the session again) its tool rounds as the model reads them
    and the answer it stored, if it got that far."""

    session: Session
    prompt: str
    prompt_seq: int
    rounds: list[dict[str, Any]] = field(default_factory=list)
    rounds_done: int = 0
    answer: Message | None = None


def earlier_try(beat: Heartbeat, run: HeartbeatRun, user: User | None) -> EarlierTry | None:
    """The cron session an earlier try of `run` asked the model in (a retry after the model
    was unavailable, a come-back for a capped route's slot, a run taken over after its
    worker died) and the prompt it stored there; None when no try got as far as storing
    the prompt, or it ran for someone else than `user` (the beat's delivery target changed
    meanwhile: their chat and tools are not carried over). Reads only."""
    if run.session_id is None:
        return None
    try:
        session = session_get(tenant=beat.tenant, session_id=run.session_id)
    except SessionNotFound:
        return None
    if session.kind != Session.Kind.CRON or session.user_id != (user.pk if user is not None else None):
        return None
    first = messages_read(session=session, after_seq=0, limit=1)
    if not first or first[0].role != Message.Role.USER:
        return None
    return EarlierTry(session=session, prompt=first[0].content, prompt_seq=first[0].seq)


def go_on(beat: Heartbeat, earlier: EarlierTry) -> bool:
    """Open the earlier try's session again for this try and read what it stored into
    `earlier`: its rounds (each call the model made with its stored result, a call whose
    result was never stored with the one qorven.agent.loop.rounds_completed stores), and
    its answer, when it got as far as storing one (its worker died before the run was
    recorded, maybe after delivering it: the run is finished from it, without asking the
    model again). False when the session could not be opened (it was pruned meanwhile):
    the run starts afresh."""
    session = earlier.session
    if not session_reopen(tenant=beat.tenant, session_id=session.pk):
        return False
    stored = list(rounds_of(tenant_id=beat.tenant_id, session_id=session.pk, seqs=[earlier.prompt_seq])
                  .order_by("seq"))
    earlier.answer = next((m for m in stored if m.role == Message.Role.ASSISTANT and not m.tool_calls), None)
    rounds = rounds_completed(session=session, rounds=stored, channel=Channel.CRON)
    earlier.rounds = [to_openai(m) for m in rounds]
    earlier.rounds_done = sum(1 for m in rounds if m.role == Message.Role.ASSISTANT)
    return True
