"""A reply's one-off targets: a platform message asked at a target that does not last (a
Discord interaction's token, Adapter.target_lasts) is answered there, and what has gone
out to such a target decides how the next part goes (channels_app.sending)."""
from __future__ import annotations

from django.db.models import Q

from sessions_app.models import Message

from .adapters import adapter_for
from .models import ChannelBinding, OutboundDelivery


def one_off_target(message: Message) -> tuple[ChannelBinding, str] | None:
    """The binding and one-off target (a Discord interaction's token) a platform message
    was asked at, if it was (see Adapter.target_lasts); None for any other message."""
    meta = message.metadata or {}
    target, binding_id = str(meta.get("reply_target") or ""), meta.get("binding")
    if not target or not binding_id:
        return None
    binding = ChannelBinding.objects.filter(tenant_id=message.tenant_id, pk=binding_id).order_by().first()
    adapter = adapter_for(binding.kind) if binding is not None else None
    if binding is None or adapter is None or adapter.target_lasts(target):
        return None
    return binding, target


# A begun part's platform_message_id when the platform's id of what it took was unreadable.
BEGUN_UNREAD = "?"


def nothing_sent_to(binding: ChannelBinding, target: str) -> bool:
    """Whether nothing has gone out to this one-off target, no part nor the start of one
    (a part still to be sent whose platform id is noted: begun, _send_failed): a Discord
    interaction's first follow-up takes the place of its deferred response, which is then
    the answer, never to be withdrawn; and a late answer's header goes with its first part
    only, once."""
    return not OutboundDelivery.objects.filter(
        Q(state=OutboundDelivery.State.SENT) | ~Q(platform_message_id=""),
        tenant_id=binding.tenant_id, binding=binding, target=target).exists()
