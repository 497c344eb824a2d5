"""What a sender the Qor does not answer is told: a pairing code, a notice where the
platform shows them waiting, or nothing — and then nothing left waiting either, whether
they were never answered (a stranger) or their answer was dropped (answers_dropped)."""
from __future__ import annotations

import logging

from django.conf import settings
from django.core.cache import cache

from qorven.runtime.log_context import log_person
from tenancy.access import ACCESS_LOST_NOTICE

from .adapters import SendError, adapter_for
from .inbound import InboundMessage
from .models import ChannelBinding, Identity
from .one_off_targets import one_off_target
from .pairing import pairing_code_message, pairing_request_for

logger = logging.getLogger(__name__)


def unknown_sender_answer(binding: ChannelBinding, identity: Identity, message: InboundMessage) -> str:
    """Never stored in a conversation, never shown to the model: a code, or silence. A
    silence where the platform shows the person waiting for the answer (Discord's /ask,
    deferred) takes the waiting away, with nothing said."""
    result, told = _unknown_sender(binding, identity, message)
    if not told:
        wait_end(binding, message)
    return result


def _unknown_sender(binding: ChannelBinding, identity: Identity, message: InboundMessage) -> tuple[str, bool]:
    if identity.approval == Identity.Approval.DENIED:
        return "denied", False
    if binding.unpaired_response == ChannelBinding.UnpairedResponse.IGNORE:
        return "ignored", False
    outcome = pairing_request_for(identity=identity, text=message.text)
    if outcome.locked:
        return "pairing-locked", False
    result, request = ("pairing-code" if outcome.new_code else "pairing-pending"), outcome.request
    if binding.unpaired_response != ChannelBinding.UnpairedResponse.CODE or request is None or not _code_due(request.pk):
        return result, False
    send_direct(binding=binding, target=message.reply_target, text=pairing_code_message(request.code))
    return result, True


def former_member_answer(binding: ChannelBinding, identity: Identity, message: InboundMessage) -> str:
    """A paired account whose person has left the workspace (removed, or deactivated):
    nothing is stored or answered, and the sender is told so in our words, as the terminal
    tells them — not handed a pairing code, whose approval would let them back in as
    someone new. Told at most every QORVEN_PAIRING_RESEND seconds, and only by a binding
    that answers strangers at all; otherwise nothing is left waiting either. The pairing
    stays: let back in, they are answered again."""
    if (binding.unpaired_response == ChannelBinding.UnpairedResponse.CODE and message.reply_target
            and _told_due(f"access-lost-told:{identity.pk}")):
        send_direct(binding=binding, target=message.reply_target, text=ACCESS_LOST_NOTICE)
    else:
        wait_end(binding, message)
    return "left"


def stranger_told(binding: ChannelBinding, message: InboundMessage) -> None:
    """A stranger's ask that the platform shows as waiting until it is answered (Discord's
    /ask, deferred): told, in our words, that only paired people are answered there. A
    mention in a group is not: the group reads on, nobody waits."""
    if not stranger_waits(binding, message):
        return
    send_direct(binding=binding, target=message.reply_target,
                text=f"Only people paired with {binding.qor.name} are answered here.")


def stranger_waits(binding: ChannelBinding, message: InboundMessage) -> bool:
    """Whether the platform shows the sender waiting for an answer (a one-off target)."""
    adapter = adapter_for(binding.kind)
    return adapter is not None and bool(message.reply_target) and not adapter.target_lasts(message.reply_target)


def wait_end(binding: ChannelBinding, message: InboundMessage) -> None:
    """The platform's waiting for an answer that will not come, taken away (a one-off
    target: a Discord interaction's deferred response). Lasting targets wait for nothing."""
    adapter = adapter_for(binding.kind)
    if adapter is not None and message.reply_target and not adapter.target_lasts(message.reply_target):
        adapter.withdraw(binding, message.reply_target)


def on_answers_dropped(sender, messages: list, **kwargs) -> None:
    """Signal receiver: messages that will get no reply and no notice. Those asked where
    the platform shows their sender waiting (a one-off target) have the waiting taken
    away, by a task: the platform is not called from the request that dropped them."""
    from .tasks import wait_end_task

    for message in messages:
        if one_off_target(message) is None:
            continue
        try:
            wait_end_task.delay(message.tenant_id, message.pk)
        except Exception as exc:  # a broker away: Discord ends the thinking itself, in 15 minutes
            logger.warning("could not queue the end of a wait for message %s: %s", message.pk, type(exc).__name__)


def _code_due(request_id: int) -> bool:
    """Whether the pending code may be sent now: when it is new, and again at most every
    QORVEN_PAIRING_RESEND seconds to a sender who keeps writing."""
    return _told_due(f"pairing-code-sent:{request_id}")


def _told_due(key: str) -> bool:
    """Whether a sender who keeps writing may be told again (at most every
    QORVEN_PAIRING_RESEND seconds); marks them told."""
    return settings.QORVEN_PAIRING_RESEND <= 0 or cache.add(key, 1, settings.QORVEN_PAIRING_RESEND)


def send_direct(*, binding: ChannelBinding, target: str, text: str) -> None:
    """A message of ours outside any conversation (a pairing code), formatting nothing.
    Best effort, one try."""
    adapter = adapter_for(binding.kind)
    if adapter is None or not target:
        return
    with log_person(target):
        try:
            adapter.send(binding, target, adapter.style.plain(text))
        except SendError as exc:
            logger.warning("could not send a %s notice: %s", binding.kind, exc)
