"""A platform message to a workspace the host has suspended (tenancy.services.tenant_suspend)."""
from __future__ import annotations

from qorven.agent.gateway import inbound_accept
from sessions_app.channel_kinds import CHAT_FAMILY
from sessions_app.services.resolve import session_resolve
from tenancy.access import surface_trust
from tenancy.trust import Trust

from .group_inbound import group_member
from .inbound import InboundMessage
from .inbound_media import inbound_images, strangers_media
from .models import ChannelBinding
from .selectors import paired_sender
from .strangers import wait_end


def suspended_keep(binding: ChannelBinding, message: InboundMessage) -> str:
    """Keep the message where it would have gone — a group's in its group chat, a paired
    member's in their conversation, with what it carried — and never answer it: no model
    call (nor a transcription), no command run, no pairing code, nothing said to the sender
    nor asked of the platform but the paired member's media (not even a sender's name: the
    caller gives only one looked up before), so nothing is lost and nothing is spent. Resuming the workspace does not answer it after
    the fact. A stranger's message is not kept, as it never is; an edit in a group is not
    either."""
    tenant, qor = binding.tenant, binding.qor
    scope = f"{binding.kind}:{binding.pk}"
    meta = {"binding": binding.pk, "reply_target": message.reply_target, "sender_id": message.sender_id,
            "no_reply": True, "suspended": True}
    user, trust, name = None, Trust.PUBLIC, message.sender_name
    if message.group:
        if message.extra.get("edit_of"):
            return "suspended"
        session = session_resolve(tenant=tenant, qor=qor, channel=message.channel, thread_id=message.thread_id,
                                  group=True)
        member = group_member(tenant, binding, message.sender_id)
        if member is not None:
            meta["user_id"] = member
        kept = member is not None or binding.group_answers == ChannelBinding.GroupAnswers.ANYONE
    else:
        sender = paired_sender(tenant=tenant, channel=binding.kind, external_id=message.sender_id)
        if sender is None or sender.member_role is None:  # type: ignore[attr-defined]
            wait_end(binding, message)
            return "suspended"
        user, name = sender.user, message.sender_name or sender.display_name
        # The trust it would have carried: what it says stays marked as whose it is.
        trust = surface_trust(role=sender.member_role, surface=binding.kind,  # type: ignore[attr-defined]
                              proven=message.sender_proven, cap=sender.trust_level)
        session = session_resolve(tenant=tenant, qor=qor, channel=message.channel, user=user,
                                  **({"sender_id": message.sender_id} if message.channel in CHAT_FAMILY
                                     else {"thread_id": message.thread_id or message.sender_id}))
        kept = True
    images, meta = inbound_images(binding, message, meta) if kept else ([], strangers_media(message, meta))
    inbound_accept(
        session=session, content=message.text, channel=message.channel, sender_name=name,
        user=user, trust=trust, external_scope=scope, external_id=message.external_id, metadata=meta,
        images=images, transcribe=False,
    )
    wait_end(binding, message)
    return "suspended"
