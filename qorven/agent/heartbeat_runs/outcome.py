"""What a heartbeat run ends with: its outcome recorded on the run and the beat, its
answer delivered to the person's chat, and our words for a model's failure."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from heartbeats_app.models import Heartbeat, HeartbeatRun
from qorven.llm import ModelError, SlotsBusy, WaitingForSlot
from qorven.llm.metered import Tally
from sessions_app.errors import SessionClosed
from sessions_app.models import Message, Session
from sessions_app.selectors import message_by_external_key
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.access import surface_access

logger = logging.getLogger(__name__)

RUNS_KEPT = 200


@dataclass
class Outcome:
    """What a run came to: recorded on the run and its beat by `run_finish`."""

    status: str
    output: str = ""
    error: str = ""  # in our words: everyone who reads the run's record reads this
    detail: str = ""  # the failure's own text: the host's (the admin hides it from tenant admins)
    reason: str = ""
    session: Session | None = None
    delivered: Message | None = None
    inputs_hash: str | None = None  # None: leave the beat's hash as it is
    spent: Tally = field(default_factory=Tally)
    reminders_done: list[int] = field(default_factory=list)  # reminders the delivered answer had in view
    at: datetime | None = None  # when the run looked at its inputs


# What a run's record says of a model failure to everyone who reads it, a tenant admin
# included: our words for its kind (qorven.llm's classification), never the provider's.
_MODEL_FAILED = {
    "unreachable": "the model did not answer",
    "rate_limited": "the model was rate limited",
    "refused": "the model refused the prompt",
    "misconfigured": "the model's settings need fixing by whoever runs this workspace",
    "quota": "the model provider's quota is used up",
    "too_long": "the prompt did not fit the model's context",
}


# A capped route's slots all taken by other calls of ours for as long as the run waited:
# the model was not asked, so it neither failed nor was rate limited.
SLOTS_BUSY_ERROR = "the model server was busy with other requests of this install; the run waits for a free slot"
# Its slots could not be read (Redis away): the model was not asked either.
SLOTS_AWAY_ERROR = "the model server's slots could not be read (Redis did not answer); the run comes back for them"


def model_failed(beat: Heartbeat, exc: ModelError, spent: Tally, reason: str = "") -> Outcome:
    """A run the model failed: our words for it, and the provider's for the host (the
    admin's detail, and the log)."""
    logger.warning("heartbeat %s: the model failed (%s): %s", beat.pk, exc.kind, exc.detail)
    if isinstance(exc, (SlotsBusy, WaitingForSlot)):
        error = SLOTS_BUSY_ERROR if isinstance(exc, SlotsBusy) else SLOTS_AWAY_ERROR
        return Outcome(HeartbeatRun.Status.FAILED, error=error, detail=f"busy: {exc.detail}"[:2000],
                       spent=spent, reason="busy")
    return Outcome(HeartbeatRun.Status.FAILED, error=_MODEL_FAILED.get(exc.kind, _MODEL_FAILED["unreachable"]),
                   detail=f"{exc.kind}: {exc.detail}"[:2000], spent=spent, reason=reason)


def result_deliver(beat: Heartbeat, run: HeartbeatRun, content: str, *, cut: str = "", again: bool = False,
                   ) -> tuple[Message | None, str]:
    """Append the result to the target user's canonical chat, tagged with the target
    channel; channels_app sends it to the platform. Idempotent per run. An answer cut
    partway (`cut`: "cut_off" by a length limit, "withheld" by the provider's content
    filter, as qorven.agent.turn_endings.cut_short says) is marked so and followed by the
    notice a turn's cut reply gets, in the same transaction: the person is never handed
    half a message with no sign that it is half.

    `again`: the run finishes from the answer an earlier try of it stored, and that try may
    have delivered it before its worker died: if so, that message is the delivery (looked
    up first: the beat may have been paused, or given to someone else, since)."""
    from ..turn_endings import CUT_SHORT_NOTICES

    scope, key = f"heartbeat:{beat.pk}", f"run:{run.pk}"
    if again:
        sent = message_by_external_key(tenant_id=beat.tenant_id, scope=scope, external_id=key)
        if sent is not None:
            return sent, ""

    def append() -> tuple[Message | None, str]:
        with transaction.atomic():
            # Read again after the model call, and held until the answer is in: the person
            # may have deleted the beat, or changed where it delivers, while the model thought.
            current = _target_locked(beat)
            if current is None:
                return None, "not delivered: the beat was deleted while it ran"
            if not current.enabled and not run.manual:  # a run asked for by hand is still wanted
                return None, "not delivered: the beat was paused while it ran"
            if current.deliver_to is None or not current.deliver_channel:
                return None, ""
            # The run read its chat and ran its tools as its recipient (else its owner),
            # as the beat was when it started: what it wrote from that person's data is
            # theirs alone. Given to someone else meanwhile, it is theirs from the next run.
            if current.deliver_to_id != (beat.deliver_to_id or beat.owner_id):
                return None, f"not delivered: the beat was given to {current.deliver_to} while it ran"
            # By the one access rule: they may have been removed or deactivated (which keeps
            # the membership row) meanwhile too.
            if surface_access(tenant=beat.tenant, user=current.deliver_to, surface=current.deliver_channel) is None:
                return None, f"not delivered: {current.deliver_to} is no longer a member of {beat.tenant.slug}"
            tag = {"heartbeat": beat.pk, "heartbeat_name": current.name, "run": run.pk}
            channel = current.deliver_channel
            chat = session_resolve(tenant=beat.tenant, qor=beat.qor, channel=channel, user=current.deliver_to)
            message = message_append(
                session=chat, role=Message.Role.ASSISTANT, content=content, channel=channel,
                sender_name=beat.qor.name, external_scope=scope, external_id=key,
                metadata={**tag, **({cut: True} if cut else {})},
            ).message
            if cut:
                message_append(session=chat, role=Message.Role.SYSTEM, content=CUT_SHORT_NOTICES[cut],
                               channel=channel, external_scope=scope, external_id=f"{key}:{cut}",
                               metadata={**tag, "notice": cut})
            return message, ""

    try:
        return append()
    except SessionClosed:
        # /clear or /compact archived the chat between reading it and appending to it: the
        # answer goes to the chat that took over, as a person's message does.
        return append()


def _target_locked(beat: Heartbeat) -> Heartbeat | None:
    """The beat as it is now, locked for the delivery's transaction (None: deleted)."""
    return (Heartbeat.objects.select_for_update(of=("self",)).select_related("deliver_to")
            .only("pk", "name", "enabled", "deliver_to", "deliver_channel")
            .filter(tenant_id=beat.tenant_id, pk=beat.pk).first())


def run_finish(beat: Heartbeat, run: HeartbeatRun, started: float, outcome: Outcome) -> None:
    """Record the outcome on the run and on the beat, and mark the reminders a delivered
    answer brought up as done, in one transaction."""
    from memory_app.services import reminders_mark_done

    now = timezone.now()
    duration = int((time.monotonic() - started) * 1000)
    tokens = outcome.spent.tokens
    with transaction.atomic():
        HeartbeatRun.objects.filter(pk=run.pk).update(
            status=outcome.status, reason=outcome.reason, finished_at=now, duration_ms=duration,
            output=outcome.output, error=outcome.error, error_detail=outcome.detail, tokens=F("tokens") + tokens,
            delivered_message=outcome.delivered,
        )
        fields: dict[str, Any] = {
            "last_run_at": run.started_at, "last_status": outcome.status, "last_error": outcome.error,
            "last_error_detail": outcome.detail,
            "last_duration_ms": duration, "tokens_spent": F("tokens_spent") + tokens, "updated_at": now,
        }
        if outcome.status in (HeartbeatRun.Status.OK, HeartbeatRun.Status.NOOP):
            fields["last_output"] = outcome.output
        if outcome.inputs_hash is not None:
            fields["last_inputs_hash"] = outcome.inputs_hash
        Heartbeat.objects.filter(pk=beat.pk).update(**fields)
        if outcome.reminders_done:
            reminders_mark_done(tenant=beat.tenant, reminder_ids=outcome.reminders_done, at=outcome.at or now)
        _prune_runs(beat)


def _prune_runs(beat: Heartbeat) -> None:
    oldest_kept = (
        HeartbeatRun.objects.filter(heartbeat=beat).order_by("-tick").values_list("tick", flat=True)[RUNS_KEPT - 1:RUNS_KEPT]
    )
    cutoff = list(oldest_kept)
    if cutoff:
        HeartbeatRun.objects.filter(heartbeat=beat, tick__lt=cutoff[0]).delete()
