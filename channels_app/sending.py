"""Sending a reply's planned parts (channels_app.delivery plans them): each part claimed
before it is sent, so it is sent at most once; a transient failure retried with backoff, a
permanent one failed where the person and the admin see it; one send per binding at a
time (channels_app.send_gate), the send holding it going on with the replies waiting.
"""
from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from qorven.runtime.database import DATABASE_DOWN, connections_drop_broken
from qorven.runtime.log_context import log_person
from qorven.runtime.prepared_read import PreparedRead
from tenancy.access import tenant_serving
from tenancy.models import Membership, PluginSetting

from .adapters import Adapter, SendError, adapter_for
from .models import OutboundDelivery
from .one_off_targets import BEGUN_UNREAD, nothing_sent_to
from .send_failures import (
    MAYBE_DELIVERED,
    account_refused,
    chat_refused,
    credentials_replaced,
    deliveries_refused_fail,
    delivery_failed_show,
    part_give_up,
    part_sent_note,
    parts_sent_record,
    reply_undelivered_tell,
)
from .send_gate import BindingBusy, GatesHeld, send_gate, send_slot_free

logger = logging.getLogger(__name__)


class RetryLater(Exception):
    def __init__(self, after: float, reason: str) -> None:
        super().__init__(reason)
        self.after = after


def send_backoff(attempt: int) -> float:
    """Seconds before the next try of a send that failed transiently (attempt 0 is the
    first try): QORVEN_SEND_BACKOFF doubled each time, at most a minute."""
    return min(settings.QORVEN_SEND_BACKOFF * 2**attempt, 60.0)


# Read for every reply sent (compiled once: qorven.runtime.prepared_read), with its
# binding's tenant (whether the host suspended the workspace: tenancy.access.tenant_serving),
# whether the person whose chat it is (`person`; None for a group's) is still in the
# workspace (`person_here`: a member, with an active account) and whether the tenant has
# the binding's channel switched off (`channel_off`, as tenancy.switches reads it: a row
# with enabled false), so the send checks the switch as it is now without a read of its own;
# and whether an older part waits for the same bot (`behind`: it may be due, and goes first).
_waiting_parts: PreparedRead[OutboundDelivery] = PreparedRead(
    lambda tenant_id, message_id: OutboundDelivery.objects.filter(
        tenant_id=tenant_id, message_id=message_id,
        state__in=[OutboundDelivery.State.PENDING, OutboundDelivery.State.SENDING],
    ).select_related("binding__tenant").annotate(
        person=F("message__session__user_id"),
        person_here=Exists(Membership.objects.filter(
            tenant_id=OuterRef("tenant_id"), user_id=OuterRef("message__session__user_id"), user__is_active=True,
        ).order_by()),
        channel_off=Exists(PluginSetting.objects.filter(
            tenant_id=OuterRef("tenant_id"), kind=PluginSetting.Kind.CHANNEL, name=OuterRef("binding__kind"),
            enabled=False,
        ).order_by()),
        behind=Exists(OutboundDelivery.objects.filter(
            tenant_id=OuterRef("tenant_id"), binding_id=OuterRef("binding_id"), state=OutboundDelivery.State.PENDING,
            id__lt=OuterRef("id"),
        ).order_by()),
    ).order_by("part"),
    tenant_id=int, message_id=int,
)


def deliver_message(*, tenant_id: int, message_id: int, worker: str,
                    sent_before: list[tuple[int, str]] | None = None) -> int:
    """Send the message's unsent parts in order. Returns how many were sent now.

    `sent_before`: (part id, platform message id) of parts a platform took whose record
    as sent was lost with the database connection (a lost connection raised from here
    names them: `parts_sent` on the exception); recorded first, as the retry's first step.

    Raises RetryLater on a transient failure (the task comes back after the backoff, or
    the platform's retry-after); after QORVEN_SEND_RETRIES of them the part ends failed
    and the parts behind it are still sent (channels_app.send_failures). Raises GateShut
    when `worker` has no send slot free. When another send holds the binding it returns at
    once: that send wakes the next waiting reply as it ends (channels_app.send_gate), so
    waiting costs no worker slot.

    Replies due that wait for the same bot ahead of it are sent first (_older_sent).

    Each part is claimed (pending → sending) before it is sent, so two tasks for one
    message (a retry and the sweeper's) never send a part twice; a part whose sender died
    mid-send is failed by the sweeper rather than sent again, and so is one whose
    connection was lost after the request went out (reset, or no answer in time)."""
    try:
        if sent_before:
            parts_sent_record(tenant_id=tenant_id, parts=sent_before)
        return _deliver(tenant_id=tenant_id, message_id=message_id, worker=worker)
    except DATABASE_DOWN as exc:
        # Whichever statement raised last (a send's cleanup runs on the same lost
        # connection), the parts the platform took and nobody recorded go to the retry.
        exc.parts_sent = [*(sent_before or []), *_unrecorded_in(exc)]  # type: ignore[union-attr]
        raise


def _deliver(*, tenant_id: int, message_id: int, worker: str) -> int:
    waiting = _sendable(tenant_id=tenant_id, message_id=message_id)
    if waiting is None:
        return 0
    binding_id = waiting[0].binding_id
    holding = False
    woken_after = message_id  # the reply the wake-up passes over: this one, sent or backing off
    try:
        with send_gate(binding_id=binding_id, worker=worker) as gates:
            holding = True
            until = time.monotonic() + DRAIN_SECONDS
            if getattr(waiting[0], "behind", False) and not _older_sent(
                    tenant_id=tenant_id, binding_id=binding_id, before=waiting[0], until=until, worker=worker,
                    gates=gates):
                woken_after = 0  # left waiting behind older replies: the wake-up sends the oldest, then this one
                return 0
            sent, following = _send_parts(waiting, gates)
            _send_waiting(tenant_id=tenant_id, binding_id=binding_id, after=message_id, until=until, worker=worker,
                          gates=gates, following=following)
            return sent
    except BindingBusy:
        return 0
    finally:
        if holding:  # a look of its own, once the bot is let go: a reply that found it busy after the last one is woken
            _wake_next(tenant_id=tenant_id, binding_id=binding_id, after=woken_after)


def _older_sent(*, tenant_id: int, binding_id: int, before: OutboundDelivery, until: float, worker: str,
                gates: GatesHeld) -> bool:
    """While the binding's gate is held: send the replies due that wait for it ahead of the
    part `before`, oldest first, as the drain would (_send_waiting). A bot's replies reach
    the person in the order they were written: a reply whose send comes first (our notice
    of a part the sweeper failed, a turn's reply sent from its task) does not overtake an
    older one left waiting while the bot was busy. Returns whether `before` may go now:
    none of them is left due (one that fails for now backs off with its retry scheduled,
    and one cut off mid-send, waiting for the sweeper, is passed over), or False when the
    time or the worker's send slots ran out first."""
    from .tasks import deliver_message_task

    last = None
    passed: list[int] = []  # older replies that cannot go now (cut off mid-send): the ones after them may
    for turn in range(DRAIN_MAX):
        if turn and (time.monotonic() >= until or not send_slot_free(worker=worker)):
            return False
        message_id = (
            OutboundDelivery.objects.filter(tenant_id=tenant_id, binding_id=binding_id,
                                            state=OutboundDelivery.State.PENDING, id__lt=before.pk)
            .filter(Q(not_before__isnull=True) | Q(not_before__lte=timezone.now()))
            .exclude(message_id__in=passed).order_by("id").values_list("message_id", flat=True).first()
        )
        if message_id is None:
            return True
        if message_id == last:
            return False  # not sent and not failed (its send lost the gate): left to the wake-up
        waiting = _sendable(tenant_id=tenant_id, message_id=message_id)
        if waiting is None:
            passed.append(message_id)
            continue
        last = message_id
        try:
            _send_parts(waiting, gates)
        except RetryLater as exc:
            deliver_message_task.apply_async((tenant_id, message_id), countdown=exc.after)
    return False


def _sendable(*, tenant_id: int, message_id: int) -> list[OutboundDelivery] | None:
    """The message's unsent parts, if they can be sent now: None when there is nothing to
    send, another task is on it (the parts after it wait there) or it is backing off
    (its retry is scheduled)."""
    waiting = _waiting_parts.all(tenant_id=tenant_id, message_id=message_id)
    if not waiting or waiting[0].state == OutboundDelivery.State.SENDING:
        return None
    if waiting[0].not_before is not None and waiting[0].not_before > timezone.now():
        return None
    return waiting


# A send that holds its binding goes on with the replies waiting for that binding, oldest
# first, until this long after it took the binding (and this many replies) before it lets
# go and queues the next: a busy bot's queue is worked through by one task instead of a
# task (and a publish, a failed try and a wake-up) per reply, and a slow platform is
# still let go after one send. It goes on only while the worker has another send slot
# free, so other tenants' replies never wait for a busy bot's queue.
DRAIN_SECONDS = 0.5
DRAIN_MAX = 50
# What a send found waiting after it when it did not look (its last part was not sent).
UNLOOKED = object()


def _send_waiting(*, tenant_id: int, binding_id: int, after: int, until: float, worker: str,
                  gates: GatesHeld, following: int | None | object = UNLOOKED) -> None:
    """While the binding's gate is held: send the replies waiting for it until `until`
    (time.monotonic(); see DRAIN_SECONDS). A reply that fails for now gets its retry
    scheduled and ends the run; what is left is woken as the gate is let go (_wake_next).
    `following`: the reply waiting next as the last send's statement found it (None: none
    was), or UNLOOKED (looked for here)."""
    from .tasks import deliver_message_task

    for _ in range(DRAIN_MAX):
        if time.monotonic() >= until:
            return
        if following is UNLOOKED:
            message_id = _next_waiting(tenant_id=tenant_id, binding_id=binding_id, after=after)
        else:
            message_id = following  # type: ignore[assignment]
        if message_id is None or not send_slot_free(worker=worker):
            return
        waiting = _sendable(tenant_id=tenant_id, message_id=message_id)
        if waiting is None:
            return
        try:
            _, following = _send_parts(waiting, gates)
        except RetryLater as exc:
            deliver_message_task.apply_async((tenant_id, message_id), countdown=exc.after)
            return
        except DATABASE_DOWN:
            raise  # the task's: it comes back on a fresh connection (and records what was sent: deliver_message)
        except Exception:  # not this send's failure: the reply is pending again, for the next send or the sweeper
            logger.exception("message %s, waiting for its bot, could not be sent", message_id)
            return


def _in_flight() -> Exists:
    """To filter parts by (negated): a part of their reply is being sent. Under the bot's
    gate one is only when its sender died mid-send (channels_app.send_gate): that reply
    waits for the sweep, which fails that part; the replies behind it are not held up by it."""
    return Exists(OutboundDelivery.objects.filter(message_id=OuterRef("message_id"),
                                                   state=OutboundDelivery.State.SENDING).order_by())


# Read after every send (compiled once): the oldest parts waiting for the binding, whether
# or not they are backing off (a time cannot be a prepared parameter; see _wake_next).
WAKE_LOOK = 8
_waiting_for_binding: PreparedRead[OutboundDelivery] = PreparedRead(
    lambda tenant_id, binding_id, after: OutboundDelivery.objects.filter(
        ~_in_flight(), tenant_id=tenant_id, binding_id=binding_id, state=OutboundDelivery.State.PENDING,
    ).exclude(message_id=after).only("id", "message_id", "not_before").order_by("id")[:WAKE_LOOK],
    tenant_id=int, binding_id=int, after=int,
)


def _wake_next(*, tenant_id: int, binding_id: int, after: int) -> None:
    """The binding's gate is open again: queue the oldest reply waiting for it (not one
    backing off: its retry is scheduled), other than `after`. Never raises for a broker
    that refuses (Redis away): the sweeper finds the reply (UNWOKEN_GRACE)."""
    from .tasks import deliver_message_task

    message_id = _next_waiting(tenant_id=tenant_id, binding_id=binding_id, after=after)
    if message_id is None:
        return
    try:
        deliver_message_task.delay(tenant_id, message_id)
    except Exception:
        logger.warning("could not queue the send of message %s, waiting for its bot; the sweeper will",
                       message_id, exc_info=True)


def _next_waiting(*, tenant_id: int, binding_id: int, after: int) -> int | None:
    """The oldest reply waiting for the binding and due (not backing off, nor cut off
    mid-send: _in_flight), other than `after`."""
    now = timezone.now()
    oldest = _waiting_for_binding.all(tenant_id=tenant_id, binding_id=binding_id, after=after)
    due = [p.message_id for p in oldest if p.not_before is None or p.not_before <= now]
    if due:
        message_id: int | None = due[0]
    elif len(oldest) < WAKE_LOOK:
        message_id = None
    else:  # the oldest few are all backing off: look further
        message_id = (
            OutboundDelivery.objects.filter(~_in_flight(), tenant_id=tenant_id, binding_id=binding_id,
                                            state=OutboundDelivery.State.PENDING)
            .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
            .exclude(message_id=after).order_by("id").values_list("message_id", flat=True).first()
        )
    return message_id


def _send_parts(rows: list[OutboundDelivery], gates: GatesHeld) -> tuple[int, int | None | object]:
    """Send a message's parts, all for one binding, in order (see deliver_message), while
    `gates` are held: how many were sent, and the reply waiting next for the binding as
    the statement marking the last part sent found it (UNLOOKED when that part was not
    sent). A platform's refusal quotes the recipient, perhaps a WhatsApp number: masked
    in the log."""
    with log_person(*{row.target for row in rows}):
        return _send_parts_in_order(rows, gates)


def _send_parts_in_order(rows: list[OutboundDelivery], gates: GatesHeld) -> tuple[int, int | None | object]:
    first = rows[0]
    adapter = adapter_for(first.binding.kind)
    assert adapter is not None, first.binding.kind  # every kind of binding has one (tests/channels_app)
    # Written before the host suspended the workspace, or before its person left it, and
    # held back since (a busy bot, a platform's retry-after): not sent to a workspace not
    # served (nor once it is served again: it would come out of the blue), nor to someone
    # no longer in it. Nobody to tell.
    reason = ("the workspace is suspended" if not tenant_serving(first.binding.tenant)
              else "the person is no longer a member of the workspace"
              if getattr(first, "person", None) is not None and not getattr(first, "person_here", True) else "")
    if reason:
        if OutboundDelivery.objects.filter(pk__in=[r.pk for r in rows], state=OutboundDelivery.State.PENDING).update(
                state=OutboundDelivery.State.FAILED, last_error=reason, updated_at=timezone.now()):
            logger.info("message %s not delivered: %s", first.message_id, reason)
        return 0, UNLOOKED
    if not first.binding.enabled or getattr(first, "channel_off", False):
        # Switched off since the reply was written (or before): a switched-off channel
        # sends nothing, on every path. The parts end failed where the person sees it.
        reason = (f"the {first.binding.kind} channel is switched off for this workspace" if first.binding.enabled
                  else "the binding is disabled")
        failed = OutboundDelivery.objects.filter(
            pk__in=[r.pk for r in rows], state=OutboundDelivery.State.PENDING
        ).update(state=OutboundDelivery.State.FAILED, last_error=reason, updated_at=timezone.now())
        if failed:
            logger.info("message %s not delivered: %s", first.message_id, reason)
            delivery_failed_show(first.tenant_id, first.message_id, first.binding.kind)
            if not adapter.target_lasts(first.target) and nothing_sent_to(first.binding, first.target):
                # Nothing went out there: an /ask is not left thinking (nothing more is said).
                adapter.withdraw(first.binding, first.target)
        return 0, UNLOOKED
    for row in rows[1:]:
        # One binding row for all the parts: credentials found replaced while one was out
        # (credentials_replaced) are those the parts after it go with.
        row.binding = first.binding
    sent = 0
    following: int | None | object = UNLOOKED
    failed = False  # a part of this reply ended failed here
    unsent: set[int] = set()  # its parts failed unsent after a refusal of the account or the chat
    for row in rows:
        if row.pk in unsent:
            continue
        if not gates.renew():
            logger.warning("message %s: its send stalled past its gates' expiry and another send took them over; "
                           "the parts left are that send's", row.message_id)
            return sent, UNLOOKED
        # Claimed only as it was read: a part another send tried since (it failed for now
        # and backs off, its try counted) is that send's retry's, not sent again from here
        # uncounted and ahead of the platform's Retry-After.
        if not OutboundDelivery.objects.filter(pk=row.pk, state=OutboundDelivery.State.PENDING,
                                               attempts=row.attempts).update(
            state=OutboundDelivery.State.SENDING, updated_at=timezone.now()
        ):
            return sent, UNLOOKED  # another task claimed it meanwhile, or tried it
        try:
            platform_id = _part_send(adapter, row)
        except SendError as exc:
            row.attempts += 1
            failed = _send_failed(row, exc) or failed  # RetryLater: the rest waits for this part's retry
            if exc.account or exc.chat:
                # The rest of this reply, and the replies waiting for that account (or
                # chat), could only be refused the same way: failed unsent, no request each.
                unsent = deliveries_refused_fail(row=row, chat=exc.chat)
            continue
        except Exception:
            # Not a platform answer (a bug, the database): the part goes back to pending
            # for the task's retry or the sweeper; nothing was sent.
            OutboundDelivery.objects.filter(pk=row.pk).update(state=OutboundDelivery.State.PENDING)
            raise
        try:
            if row is rows[-1]:
                following = _part_sent_and_next(row, platform_id)
            else:
                OutboundDelivery.objects.filter(pk=row.pk).update(
                    state=OutboundDelivery.State.SENT, platform_message_id=platform_id, sent_at=timezone.now(),
                    attempts=row.attempts + 1, not_before=None, last_error="", updated_at=timezone.now(),
                )
        except DATABASE_DOWN as exc:
            _part_sent_after_loss(row, platform_id, exc)
            raise  # the gates went with the connection: the rest is the task's retry's, under them again
        sent += 1
    if failed or first.part > 0:  # a part of it failed, here or in an earlier run: say so once
        reply_undelivered_tell(tenant_id=first.tenant_id, message_id=first.message_id)
        following = UNLOOKED  # that notice waits for the binding too: looked for afresh
    return sent, following


def _part_send(adapter: Adapter, row: OutboundDelivery) -> str:
    """Send `row` through its binding: the platform's id for it. Refused for the account
    with credentials the binding no longer has (a token fixed in the admin while the part
    was out), it goes again, once, with those it has now: the refusal says nothing of
    them, and the platform took nothing of the part. Raises SendError."""
    try:
        return adapter.send(row.binding, row.target, row.text)
    except SendError as exc:
        if not exc.account or exc.begun_id is not None or not credentials_replaced(row.binding):
            raise
    logger.info("message %s part %s was refused for the binding's former credentials; sent again with its "
                "current ones", row.message_id, row.part)
    row.attempts += 1
    return adapter.send(row.binding, row.target, row.text)


# The last part of a reply marked sent, and in the same statement the oldest reply due
# that waits for the binding (other than this one, and none cut off mid-send:
# _in_flight): what the send holding the binding
# sends next (_send_waiting), without a look of its own. The look after the gate is let
# go (_wake_next) stays: a reply that found the gate busy after this statement is woken.
_SENT_AND_NEXT = (
    "UPDATE {table} SET state = %s, platform_message_id = %s, sent_at = %s, attempts = %s, not_before = NULL,"
    " last_error = '', updated_at = %s WHERE id = %s RETURNING (SELECT waiting.message_id FROM {table} waiting"
    " WHERE waiting.tenant_id = %s AND waiting.binding_id = %s AND waiting.state = %s AND waiting.message_id <> %s"
    " AND (waiting.not_before IS NULL OR waiting.not_before <= %s) AND NOT EXISTS (SELECT 1 FROM {table} flight"
    " WHERE flight.message_id = waiting.message_id AND flight.state = %s) ORDER BY waiting.id LIMIT 1)"
)


def _part_sent_after_loss(row: OutboundDelivery, platform_id: str, exc: Exception) -> None:
    """The platform took the part, and the connection that was to record it was lost
    (killed, a failover). Left `sending`, the part would be taken for one cut off mid-send:
    failed, and its person told it may be missing though it arrived. Recorded sent on a
    fresh connection; if the database is still away, the part is named on `exc` for the
    task's retry to record (deliver_message's `sent_before`), and noted in the cache for a
    sweep that comes first (channels_app.send_failures.part_sent_note)."""
    connections_drop_broken()
    try:
        parts_sent_record(tenant_id=row.tenant_id, parts=[(row.pk, platform_id)])
    except DATABASE_DOWN:
        connections_drop_broken()
        part_sent_note(part_id=row.pk, platform_id=platform_id)
        exc.parts_sent = [(row.pk, platform_id)]  # type: ignore[attr-defined]


def _unrecorded_in(exc: BaseException) -> list[tuple[int, str]]:
    """The parts sent and not recorded named on `exc` and the exceptions it was raised
    while handling (_part_sent_after_loss)."""
    found: list[tuple[int, str]] = []
    seen: set[int] = set()
    at: BaseException | None = exc
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        found.extend(getattr(at, "parts_sent", ()))
        at = at.__context__
    return found


def _part_sent_and_next(row: OutboundDelivery, platform_id: str) -> int | None:
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(_SENT_AND_NEXT.format(table=OutboundDelivery._meta.db_table), [
            OutboundDelivery.State.SENT, platform_id, now, row.attempts + 1, now, row.pk,
            row.tenant_id, row.binding_id, OutboundDelivery.State.PENDING, row.message_id, now,
            OutboundDelivery.State.SENDING,
        ])
        found = cursor.fetchone()
    return found[0] if found is not None else None


def _send_failed(row: OutboundDelivery, exc: SendError) -> bool:
    """Record the platform's refusal of `row` (its `attempts` counted): True when the part
    ended failed (refused for good, in doubt, out of retries); raises RetryLater when it is
    to be tried again. A failed part never holds up the parts behind it. A part the
    platform took a message of ours ahead of (exc.begun_id) keeps that message's id: its
    retry does not send it again (nothing_sent_to)."""
    if exc.begun_id is not None:
        row.platform_message_id = exc.begun_id or BEGUN_UNREAD
    if exc.ambiguous:
        # The request went out and no answer came back: the platform may have the part,
        # and a part is never sent twice, so it ends failed, shown as such.
        row.state, row.not_before = OutboundDelivery.State.FAILED, None
        row.last_error = f"{exc}: the connection was lost after sending; {MAYBE_DELIVERED}"[:1000]
        row.save(update_fields=["attempts", "last_error", "state", "not_before", "platform_message_id", "updated_at"])
        logger.warning("delivery of message %s part %s is in doubt, not sent again: %s", row.message_id, row.part, exc)
        delivery_failed_show(row.tenant_id, row.message_id, row.binding.kind)
        return True
    refused = account_refused if exc.account else chat_refused if exc.chat else None
    row.last_error = (f"{refused(row.binding.kind)}: {exc}" if refused else str(exc))[:1000]
    row.state = OutboundDelivery.State.FAILED if exc.permanent else OutboundDelivery.State.PENDING
    after = exc.retry_after if exc.retry_after is not None else send_backoff(row.attempts - 1)
    row.not_before = None if exc.permanent else timezone.now() + timedelta(seconds=after)
    row.save(update_fields=["attempts", "last_error", "state", "not_before", "platform_message_id", "updated_at"])
    if exc.permanent:
        logger.warning("delivery of message %s part %s failed for good: %s", row.message_id, row.part, exc)
        delivery_failed_show(row.tenant_id, row.message_id, row.binding.kind)
        return True
    if row.attempts > settings.QORVEN_SEND_RETRIES:
        return part_give_up(row=row)
    # The parts after it go with its retry, and say so: a reply backing off is then passed
    # over whole by the sends that look for the replies due on its bot (_next_waiting,
    # _older_sent, the sweeper), not found due by a later part and left unsent there,
    # with the replies behind it held up until that retry.
    OutboundDelivery.objects.filter(tenant_id=row.tenant_id, message_id=row.message_id, part__gt=row.part,
                                    state=OutboundDelivery.State.PENDING).update(not_before=row.not_before)
    raise RetryLater(after, str(exc)) from None
