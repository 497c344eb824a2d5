"""The reserved system beats. They run natively: no model call, no cron session.

- `__qorven_clear_images__` deletes the tenant's images older than QORVEN_IMAGE_RETENTION.
- `__qorven_reminders__` delivers every reminder of the tenant that has come due: a
  "Reminder: …" message from the Qor in the user's canonical chat, on the chat channel
  the reminder was made on (web when it was made elsewhere), sent there like any reply.
  Each reminder is appended once (deduplicated on the reminder and its due time, so a
  re-run or a concurrent run adds nothing) and then marked done.
- `__qorven_retention__` deletes the tenant's archived conversations that ended more than
  its `conversation_retention_days` ago (nothing when it has none), with their messages
  and attachments; memories stay.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from memory_app.reminders import reminders_due_in_tenant
from memory_app.services import reminders_mark_done
from sessions_app.channel_kinds import CHAT_FAMILY, Channel
from sessions_app.errors import SessionClosed
from sessions_app.models import Message
from sessions_app.retention import image_prune, sessions_prune
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.models import Tenant

from .models import CLEAR_IMAGES, CONVERSATION_RETENTION, DELIVER_REMINDERS, Heartbeat
from .retention import image_retention

logger = logging.getLogger(__name__)
REMINDER_PREFIX = "Reminder: "


def system_beat_run(beat: Heartbeat) -> str:
    """Run a reserved beat; return the output recorded on its run."""
    if beat.name == CLEAR_IMAGES:
        return clear_images(tenant=beat.tenant)
    if beat.name == DELIVER_REMINDERS:
        return reminders_deliver(tenant=beat.tenant, now=timezone.now())
    if beat.name == CONVERSATION_RETENTION:
        return conversations_expire(tenant=beat.tenant)
    raise ValueError(f"{beat.name!r} is not a system beat")


def clear_images(*, tenant: Tenant) -> str:
    retention = image_retention()
    older_than = timezone.now() - retention if retention else None
    deleted = image_prune(tenant=tenant, older_than=older_than)
    scope = f"older than {settings.QORVEN_IMAGE_RETENTION}" if retention else "(no retention: all)"
    return f"Deleted {deleted} image(s) {scope}."


def conversations_expire(*, tenant: Tenant) -> str:
    days = tenant.conversation_retention_days
    if not days:
        return "Conversations are kept (no retention set for this workspace)."
    gone = sessions_prune(tenant=tenant, ended_before=timezone.now() - timedelta(days=days))
    return (f"Deleted {gone['sessions']} archived conversation(s) ({gone['messages']} message(s), "
            f"{gone['images']} attachment(s)) that ended more than {days} days ago.")


def reminders_deliver(*, tenant: Tenant, now: datetime) -> str:
    """Deliver the tenant's due reminders (see the module docstring); return a summary."""
    delivered: list[int] = []
    for reminder in reminders_due_in_tenant(tenant=tenant, now=now):
        channel = next((c for c in reminder.channels or () if c in CHAT_FAMILY), Channel.WEB)
        try:
            chat = session_resolve(tenant=tenant, qor=reminder.qor, channel=channel, user=reminder.user)
            message_append(
                session=chat, role=Message.Role.ASSISTANT, content=REMINDER_PREFIX + reminder.content,
                channel=channel, sender_name=reminder.qor.name,
                external_scope=f"reminder:{reminder.pk}", external_id=f"due:{reminder.period_start.isoformat()}",
                metadata={"reminder": reminder.pk},
            )
        except SessionClosed:
            logger.info("reminder %s: the chat moved on while delivering; it stays due", reminder.pk)
            continue
        delivered.append(reminder.pk)
    reminders_mark_done(tenant=tenant, reminder_ids=delivered, at=now)
    return f"Delivered {len(delivered)} reminder(s)."
