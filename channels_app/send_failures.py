"""How a part of a reply sent to a platform ends failed, and who is told.

A part fails alone: refused for good, in doubt (the request went out and no answer came
back), out of retries, cut off by a worker that died mid-send, or reported undelivered
by the platform later. The parts behind it are still sent (channels_app.sending). Live
surfaces mark the reply "not delivered to <platform>" at once; the admin keeps the
platform's error. Once nothing of a reply is left to send and one of its parts failed —
its only one, or one of several — the person on the platform gets one notice of ours
saying it, or something of it, may not have reached them, and where they can read it
when they have the web page or the terminal (`reply_undelivered_tell`) — never the
platform's words. That notice failing in turn is the end of it; when the platform refused
the account itself (a bad token), or the one chat (the person blocked the bot), the notice
is not sent there at all, only stored; and the parts waiting then for that account (or
that chat) are failed unsent, not refused one request at a time
(`deliveries_refused_fail`).
"""
from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import F
from django.utils import timezone

from sessions_app.errors import SessionClosed
from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from tenancy.access import tenant_serving
from tenancy.selectors import membership_active, surfaces_own
from tenancy.switches import channel_enabled

from .adapters.base import Undelivered
from .chat import chat_page_address
from .models import ChannelBinding, OutboundDelivery
from .selectors import account_paired

logger = logging.getLogger(__name__)

# Why a part ended failed when nobody can tell whether the platform got it.
MAYBE_DELIVERED = "it may or may not have been delivered"


def account_refused(platform: str) -> str:
    """How a part's last error begins when the platform refused the account itself
    (SendError.account), not only that part: the admin reads it, and our notice of the
    reply is not sent through that account (reply_undelivered_tell)."""
    return f"{platform} refused the account itself (its token or access), not only this message"


def chat_refused(platform: str) -> str:
    """How a part's last error begins when the platform refused the one chat (SendError.chat:
    the person blocked the bot, it was removed from the group, the chat is closed to it):
    our notice of the reply is not sent to that chat (reply_undelivered_tell)."""
    return f"{platform} refused this chat (blocked, left or closed to us), not only this message"


def refusal_of(part: OutboundDelivery) -> str:
    """Which of those refusals a failed part's error records ("" for none): a part failed
    unsent after one (deliveries_refused_fail) quotes it."""
    kind = part.binding.kind
    return next((said for said in (account_refused(kind), chat_refused(kind)) if said in part.last_error), "")


def deliveries_refused_fail(*, row: OutboundDelivery, chat: bool) -> set[int]:
    """With the binding's gate held (channels_app.sending), just after the platform refused
    `row`'s send for its account (or, `chat`, for its chat), its error recorded: the parts
    waiting for that account (for that chat) end failed unsent, quoting that error, and
    their people are told as for any failed reply (the notice stored, not sent). Each
    would only be refused the same way, a request apiece.

    Only the parts waiting now are failed; nothing is kept on the binding. A part planned
    after this (a new reply) is tried: a token fixed in the admin, or access given back on
    the platform's side with the same credentials (a Slack scope granted, a Twilio account
    reactivated, a person unblocking the bot), works with the next send. And only while the
    binding's credentials are still those refused: a token fixed meanwhile sends them, the
    binding `row` holds given it for the parts sent after (credentials_replaced).
    After a refusal of the account, a one-off target (a Discord /ask in time goes through
    its interaction's own token, not the bot's) is left to be tried. Returns the ids of the parts failed."""
    from .adapters import adapter_for

    binding = row.binding
    if credentials_replaced(binding):
        return set()
    adapter = adapter_for(binding.kind)
    waiting = OutboundDelivery.objects.filter(tenant_id=row.tenant_id, binding_id=binding.pk,
                                              state=OutboundDelivery.State.PENDING).exclude(pk=row.pk)
    if chat:
        waiting = waiting.filter(target=row.target)
    parts = [(pk, message_id) for pk, message_id, target in waiting.order_by("pk").values_list(
        "pk", "message_id", "target") if chat or adapter is None or adapter.target_lasts(target)]
    if not parts:
        return set()
    failed = OutboundDelivery.objects.filter(pk__in=[pk for pk, _ in parts], state=OutboundDelivery.State.PENDING).update(
        state=OutboundDelivery.State.FAILED, not_before=None, updated_at=timezone.now(),
        last_error=f"not sent: a send just before it found that {row.last_error}"[:1000],
    )
    messages = list(dict.fromkeys(message_id for _, message_id in parts))
    logger.warning("%s parts of %s replies waiting for binding %s failed unsent: %s", failed, len(messages),
                   binding.pk, (chat_refused if chat else account_refused)(binding.kind))
    for message_id in messages:
        delivery_failed_show(row.tenant_id, message_id, binding.kind)
        if message_id != row.message_id:  # that reply's send tells of it as it ends
            reply_undelivered_tell(tenant_id=row.tenant_id, message_id=message_id)
    return {pk for pk, _ in parts}


def credentials_replaced(binding: ChannelBinding) -> bool:
    """Whether the binding's credentials were changed since `binding` was read (a token
    fixed in the admin while a send through it was out): if so, `binding` is given the
    ones stored now, so what is sent through it next goes with those, not with the
    credentials the platform refused."""
    stored = ChannelBinding.objects.filter(pk=binding.pk).values_list("credentials", flat=True).first()
    if stored is None or stored == binding.credentials:
        return False
    binding.credentials = stored
    return True


# The notice the person gets on the platform: its key in message metadata, and its text,
# from a fixed set — what may be missing (all of the reply, or a part of it), where the
# whole of it can be read (the web page, else the terminal, for a person who has them),
# what to do. "May not": a part cut off mid-send or left without an answer may have got there.
UNDELIVERED = "reply_undelivered"
_MISSING = {
    "whole": "My last reply may not have reached you.",
    "part": "Part of my last reply may not have reached you, so something above may be missing.",
}
_READ_IT = {
    "web": "You can read it in our chat on the web page{address}.",
    "tui": "You can read it in our chat in the terminal (qorven chat).",
}
_ASK_AGAIN = "Ask me to send it again if you need it."


def undelivered_notice(*, several: bool, surfaces: list[str], page: str = "") -> str:
    """The notice's text: for a reply in `several` parts or one; `surfaces` where the
    person can read it (surfaces_own); `page` the chat page's address, when known."""
    read = next((_READ_IT[s].format(address=f" ({page})" if page else "") for s in ("web", "tui") if s in surfaces), "")
    return " ".join(t for t in (_MISSING["part" if several else "whole"], read, _ASK_AGAIN) if t)


def delivery_failed_show(tenant_id: int, message_id: int, platform: str) -> None:
    """Live surfaces mark the reply "not delivered to <platform>"."""
    from qorven.runtime.publisher import broadcast_soon

    row = Message.objects.filter(tenant_id=tenant_id, pk=message_id).values("session_id", "seq").first()
    if row is not None:
        broadcast_soon(row["session_id"], {"type": "message.delivery", "seq": row["seq"], "delivery": "failed",
                                           "platform": platform})


def part_give_up(*, row: OutboundDelivery) -> bool:
    """The part's retries are spent: it ends failed, its last error kept for the admin.
    Only this part: the ones behind it get their own tries."""
    if not OutboundDelivery.objects.filter(pk=row.pk, state=OutboundDelivery.State.PENDING).update(
        state=OutboundDelivery.State.FAILED, not_before=None, updated_at=timezone.now(),
        last_error=f"gave up after {row.attempts} attempts; last error: {row.last_error}"[:1000],
    ):
        return False
    logger.warning("gave up delivering message %s part %s after %s attempts", row.message_id, row.part, row.attempts)
    delivery_failed_show(row.tenant_id, row.message_id, row.binding.kind)
    return True


def deliveries_interrupted_fail(*, binding_id: int) -> list[tuple[int, int]]:
    """With the binding's gate held (channels_app.send_gate.binding_taken), so nothing is
    being sent on it: its parts still `sending` were cut off by a sender that died. They
    may have reached the platform, and a part is never sent twice, so they end failed,
    shown as such. Returns the (tenant id, message id) of their replies, whose other parts
    are to be sent (and the person told) once the gate is let go."""
    rows = list(OutboundDelivery.objects.filter(binding_id=binding_id, state=OutboundDelivery.State.SENDING)
                .select_related("binding").order_by("pk"))
    failed: list[tuple[int, int]] = []
    taken = _sent_notes([row.pk for row in rows])
    for row in rows:
        if row.pk in taken:  # the platform took it; the record of that was lost with the database
            parts_sent_record(tenant_id=row.tenant_id, parts=[(row.pk, taken[row.pk])])
            logger.info("message %s part %s was sent before its database connection was lost; recorded sent",
                        row.message_id, row.part)
            if (row.tenant_id, row.message_id) not in failed:
                failed.append((row.tenant_id, row.message_id))
        elif OutboundDelivery.objects.filter(pk=row.pk, state=OutboundDelivery.State.SENDING).update(
            state=OutboundDelivery.State.FAILED, updated_at=timezone.now(),
            last_error=f"the worker stopped while sending this part; {MAYBE_DELIVERED}",
        ):
            logger.warning("message %s part %s was cut off mid-send; %s", row.message_id, row.part, MAYBE_DELIVERED)
            delivery_failed_show(row.tenant_id, row.message_id, row.binding.kind)
            if (row.tenant_id, row.message_id) not in failed:
                failed.append((row.tenant_id, row.message_id))
    return failed


# How long a part the platform took is remembered in the cache while its record as sent
# waits for the database (part_sent_note): past any outage a sweep would still find.
SENT_NOTE_SECONDS = 24 * 3600


def _sent_note_key(part_id: int) -> str:
    return f"qorven:part-sent:{part_id}"


def part_sent_note(*, part_id: int, platform_id: str) -> None:
    """Remember, outside the database, that the platform took a part whose record as sent
    the database could not take (its connection was lost, and no other could be had): the
    sweep that would take the part, still `sending`, for one cut off mid-send records it
    sent instead (deliveries_interrupted_fail). Best effort: never raises."""
    try:
        cache.set(_sent_note_key(part_id), platform_id, SENT_NOTE_SECONDS)
    except Exception:
        logger.warning("could not note that part %s was sent", part_id, exc_info=True)


def _sent_notes(part_ids: list[int]) -> dict[int, str]:
    if not part_ids:
        return {}
    try:
        found = cache.get_many([_sent_note_key(pk) for pk in part_ids])
    except Exception:
        logger.warning("could not read which interrupted parts were sent", exc_info=True)
        return {}
    return {pk: found[_sent_note_key(pk)] for pk in part_ids if _sent_note_key(pk) in found}


def parts_sent_record(*, tenant_id: int, parts: list[tuple[int, str]]) -> None:
    """Record as sent the parts a platform took — (part id, platform message id) — while
    they are still `sending` (a sweep that failed one as cut off first has told its person,
    and that stands)."""
    now = timezone.now()
    for part_id, platform_id in parts:
        OutboundDelivery.objects.filter(tenant_id=tenant_id, pk=part_id, state=OutboundDelivery.State.SENDING).update(
            state=OutboundDelivery.State.SENT, platform_message_id=platform_id, sent_at=now,
            attempts=F("attempts") + 1, not_before=None, last_error="", updated_at=now,
        )


def deliveries_undelivered(*, binding: ChannelBinding, reports: list[Undelivered]) -> int:
    """The platform reports parts of `binding`'s it had accepted as undelivered after all:
    they end failed, with its reason kept for the admin, and live surfaces mark the reply
    "not delivered". A report already taken, or for a part that is not ours, changes
    nothing. Returns how many parts were failed."""
    reasons = {r.platform_message_id: f"{account_refused(binding.kind)}: {r.reason}" if r.account
               else f"{chat_refused(binding.kind)}: {r.reason}" if r.chat else r.reason for r in reports}
    rows = list(OutboundDelivery.objects.filter(
        tenant_id=binding.tenant_id, binding=binding, platform_message_id__in=list(reasons),
        state=OutboundDelivery.State.SENT,
    ).order_by("pk").values_list("pk", "message_id", "platform_message_id"))
    failed = 0
    for pk, message_id, platform_id in rows:
        if OutboundDelivery.objects.filter(pk=pk, state=OutboundDelivery.State.SENT).update(
            state=OutboundDelivery.State.FAILED, last_error=reasons[platform_id][:1000], updated_at=timezone.now(),
        ):
            failed += 1
            logger.warning("delivery of message %s was reported undelivered by %s", message_id, binding.kind)
            delivery_failed_show(binding.tenant_id, message_id, binding.kind)
            reply_undelivered_tell(tenant_id=binding.tenant_id, message_id=message_id)
    if len(rows) < len(reasons):
        logger.info("%s reported %d parts undelivered that are not this binding's sent parts",
                    binding.kind, len(reasons) - len(rows))
    return failed


def reply_undelivered_tell(*, tenant_id: int, message_id: int) -> bool:
    """If nothing of the reply is left to send and a part of it ended failed, tell the
    person where it went: a notice of ours, appended to the conversation with the reply's
    channel (so it is delivered to the same chat — channels_app.delivery — and shown on the
    page; as every notice, never read by the model). Once per reply: the notice's external
    id is the reply's, so running this again stores and sends nothing; nor while such a
    notice to the same chat has not gone out yet (it tells of this one too), nor when one
    stored unsent to that chat comes after the reply (the same). Never for this
    notice itself: its failing would call for another, and so on. (Any other notice or a
    command's answer of ours that failed is told of like a reply: the person was answered
    and got nothing, and what tells them is this notice, which ends there.) Nobody is told
    in a workspace not served, in a chat whose pairing ended or whose person left, or on a
    channel switched off: nothing is sent there. Returns whether the notice was stored now."""
    parts = list(OutboundDelivery.objects.filter(tenant_id=tenant_id, message_id=message_id)
                 .select_related("binding__tenant").order_by("part"))
    states = {part.state for part in parts}
    if (OutboundDelivery.State.FAILED not in states
            or OutboundDelivery.State.PENDING in states or OutboundDelivery.State.SENDING in states):
        return False
    reply = (Message.objects.filter(tenant_id=tenant_id, pk=message_id)
             .select_related("session__qor__tenant", "session__user").first())
    if reply is None or (reply.metadata or {}).get("notice") == UNDELIVERED:
        return False
    if not _reachable(reply, parts[0]):
        logger.info("message %s was not delivered; its chat cannot be sent to now, so nobody is told", reply.pk)
        return False
    if _notice_waiting(parts[0]):
        logger.info("message %s was not delivered; the notice to its chat not yet sent says so", reply.pk)
        return False
    if _notice_stored_after(reply, parts[0]):
        logger.info("message %s was not delivered; the notice stored after it, unsent, says so", reply.pk)
        return False
    text = undelivered_notice(several=len(parts) > 1, **_where_to_read(reply.session))
    metadata: dict[str, Any] = {"notice": UNDELIVERED, "undelivered": reply.pk}
    refused = next((said for said in map(refusal_of, parts) if said), "")
    if refused:
        # Sent through the account the platform refused, or to the chat it refused, it
        # could only fail too: stored (the page shows it) with its delivery failed unsent
        # (channels_app.delivery).
        metadata["not_sent"] = f"not sent: the reply it tells of found that {refused}"
    try:
        stored = message_append(session=reply.session, role=Message.Role.SYSTEM, content=text,
                                channel=reply.channel, external_scope=UNDELIVERED, external_id=str(reply.pk),
                                metadata=metadata)
    except SessionClosed:
        logger.info("message %s was not delivered; its chat was cleared since, so nobody is told", reply.pk)
        return False
    if stored.created and "not_sent" in metadata:
        logger.warning("message %s was not delivered: %s; our notice of it is stored and not sent",
                       reply.pk, refused)
    elif stored.created:
        logger.info("message %s was not delivered%s; the person is told", reply.pk, " in full" if len(parts) > 1 else "")
    return stored.created


def _reachable(reply: Message, part: OutboundDelivery) -> bool:
    """Whether a notice may go where the reply's `part` went, now: the workspace is served,
    the channel on, and a person's chat still theirs — a member, and the account that asked
    (or, for a reply to no one message, the one whose chat it is) still paired to them."""
    binding, session = part.binding, reply.session
    if not tenant_serving(binding.tenant) or not binding.enabled or not channel_enabled(
            tenant=binding.tenant, channel=binding.kind):
        return False
    if session.user is None:  # a group's chat: nobody's pairing to end
        return True
    reply_to = (reply.metadata or {}).get("reply_to")
    asked = Message.objects.filter(tenant_id=reply.tenant_id, session_id=session.pk, seq=reply_to).order_by().values_list(
        "metadata", flat=True).first() if reply_to else None
    sender = str((asked or {}).get("sender_id") or "")
    return (membership_active(tenant=binding.tenant, user=session.user) is not None
            and account_paired(tenant=binding.tenant, channel=binding.kind, user=session.user, sender=sender,
                               chat=part.target))


def _notice_waiting(part: OutboundDelivery) -> bool:
    """Whether our notice to the chat `part` went to has not gone out yet: it tells of this
    reply too. A platform refusing one reply after another (or down while they came)
    would otherwise have the person hear it once for each."""
    return OutboundDelivery.objects.filter(
        tenant_id=part.tenant_id, binding_id=part.binding_id, target=part.target,
        state__in=[OutboundDelivery.State.PENDING, OutboundDelivery.State.SENDING],
        message__metadata__notice=UNDELIVERED,
    ).exists()


def _notice_stored_after(reply: Message, part: OutboundDelivery) -> bool:
    """Whether our notice to the chat `part` went to, stored unsent (channels_app.delivery:
    the account or the chat refused), comes after `reply` in its conversation: it tells of
    this reply too. Replies failed unsent together, after one refusal, would otherwise
    each add the same notice to the page."""
    return OutboundDelivery.objects.filter(
        tenant_id=part.tenant_id, binding_id=part.binding_id, target=part.target,
        state=OutboundDelivery.State.FAILED, attempts=0, last_error__startswith="not sent",
        message__metadata__notice=UNDELIVERED, message__session_id=reply.session_id, message__seq__gt=reply.seq,
    ).exists()


def _where_to_read(session: Session) -> dict[str, Any]:
    """Where the person can read the reply: their surfaces (tenancy.selectors.surfaces_own)
    for their one conversation, which the web page and the terminal show (not an email
    thread's, an SMS one's or a group's), and the page's address when it is configured."""
    if session.user is None or session.kind != Session.Kind.CANONICAL:
        return {"surfaces": []}
    surfaces = surfaces_own(tenant=session.qor.tenant, user=session.user)
    page = ""
    if "web" in surfaces and settings.QORVEN_PUBLIC_URL_GIVEN:  # a guessed address would mislead
        page = chat_page_address(qor=session.qor, user=session.user)
    return {"surfaces": surfaces, "page": page}
