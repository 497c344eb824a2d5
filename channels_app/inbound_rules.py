"""The channel rules a stored platform message goes through before it reaches the agent:
a channel switched off, a group chat's new id, a suspended workspace (channels_app.suspended_inbound), a group's message (channels_app.group_inbound),
an unknown or former sender (pairing: channels_app.strangers), the surface's trust; then the
message's media are fetched and it is handed to the agent's gateway."""
from __future__ import annotations

import logging

from django.core.cache import cache

from qorven.agent.gateway import inbound_accept
from qorven.runtime.cache_away import cache_or
from qorven.runtime.repeated_failure import RepeatedFailure
from sessions_app.channel_kinds import CHAT_FAMILY
from sessions_app.services.resolve import session_resolve
from tenancy.access import surface_access, surface_access_of_role, tenant_serving
from tenancy.switches import channel_enabled

from .adapters import adapter_for
from .delivery import origin_note
from .event_done import event_result_if_stored
from .group_inbound import group_message_handle
from .inbound import InboundMessage
from .inbound_media import inbound_images
from .models import ChannelBinding, Identity
from .pairing import identity_get_or_create
from .services import group_chat_migrate
from .strangers import former_member_answer, unknown_sender_answer, wait_end
from .suspended_inbound import suspended_keep

logger = logging.getLogger(__name__)


def inbound_message_handle(binding: ChannelBinding, message: InboundMessage) -> str:
    """Apply the channel rules to one message and hand it on; what became of it (the
    event's result: "accepted", "group", "group-context", "switched-off", …)."""
    tenant, qor = binding.tenant, binding.qor
    # Read fresh here: a webhook may have accepted this from a server whose cached binding
    # or switch (qorven.runtime.row_cache) had not yet seen it turned off.
    if not binding.enabled or not channel_enabled(tenant=tenant, channel=binding.kind):
        wait_end(binding, message)  # nothing is said on it: nor is an /ask left thinking
        return "switched-off"
    if message.extra.get("migrated_from"):  # the group chat has a new id: its conversation follows
        group_chat_migrate(binding=binding, channel=message.channel, old_chat=str(message.extra["migrated_from"]),
                           new_chat=message.thread_id)
        return "group-migrated"
    serving = tenant_serving(tenant)
    if not message.sender_name:
        # Suspended, only a name already looked up: nothing asks the platform for one on
        # the workspace's behalf (its bot token) while nobody in it is served.
        message = message.model_copy(update={"sender_name": _display_name(binding, message.sender_id, ask=serving)})
    if not serving:
        return suspended_keep(binding, message)
    if message.group:
        return group_message_handle(binding, message)

    identity = identity_get_or_create(
        tenant=tenant, channel=binding.kind, external_id=message.sender_id, display_name=message.sender_name
    )
    if identity.approval != Identity.Approval.APPROVED or identity.user_id is None:
        return unknown_sender_answer(binding, identity, message)
    adapter = adapter_for(binding.kind)
    lasting = adapter is None or adapter.target_lasts(message.reply_target)
    if identity.reply_target != message.reply_target and message.reply_target and lasting:
        Identity.objects.filter(pk=identity.pk).update(reply_target=message.reply_target)
    user = identity.user
    if hasattr(identity, "member_role"):  # read with the identity (channels_app.pairing)
        trust = surface_access_of_role(user=user, role=getattr(identity, "member_role"), surface=binding.kind,
                                       proven=message.sender_proven, cap=identity.trust_level)
    else:
        trust = surface_access(tenant=tenant, user=user, surface=binding.kind, proven=message.sender_proven,
                               cap=identity.trust_level)
    if trust is None:  # removed from the workspace, or deactivated
        return former_member_answer(binding, identity, message)
    if message.channel in CHAT_FAMILY:
        session = session_resolve(tenant=tenant, qor=qor, channel=message.channel, user=user,
                                  sender_id=message.sender_id)
    else:  # email threads, sms numbers
        session = session_resolve(tenant=tenant, qor=qor, channel=message.channel, user=user,
                                  thread_id=message.thread_id or message.sender_id)
    meta = {"binding": binding.pk, "reply_target": message.reply_target, "sender_id": message.sender_id}
    images, meta = inbound_images(binding, message, meta)
    scope = f"{binding.kind}:{binding.pk}"
    event_result_if_stored("accepted", external_scope=scope, external_id=message.external_id)
    # Voice notes are transcribed once stored (qorven.agent.voice), as on every surface.
    result = inbound_accept(
        session=session, content=message.text, channel=message.channel,
        sender_name=message.sender_name or identity.display_name, user=user, trust=trust,
        external_scope=scope, external_id=message.external_id, metadata=meta, images=images,
    )
    if result.created:
        origin_note(message=result.message, binding=binding, reply_target=message.reply_target,
                    sender_id=message.sender_id)
    return "accepted" if result.created else "duplicate"


NAME_TTL = 24 * 3600  # a sender's looked-up name is asked for again after a day

# The names only spare the platform's API a call: with the cache away (Redis down) each
# message asks again, and is handled as ever.
_names_away = RepeatedFailure(logger, "senders' names cannot be read or kept in the cache; "
                                      "each is asked of its platform")


def _display_name(binding: ChannelBinding, sender_id: str, *, ask: bool = True) -> str:
    """The name of a sender whose platform sent only an id (Slack), from the cache or, with
    `ask`, the platform's API; "" when it cannot be had (the message counts without it)."""
    adapter = adapter_for(binding.kind)
    if adapter is None or not sender_id:
        return ""
    key = f"sender-name:{binding.pk}:{sender_id}"
    cached, name = cache_or((False, None), lambda: (True, cache.get(key)), away=_names_away)
    if name is None:
        if not ask:
            return ""
        name = adapter.display_name(binding, sender_id)
        if cached:  # an unknown name is tried again soon
            cache_or(None, lambda: cache.set(key, name, NAME_TTL if name else 300), away=_names_away)
    return name

