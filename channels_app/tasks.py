"""Celery entry points of the edges: process an inbound event, deliver a reply."""
from __future__ import annotations

import logging

from collections.abc import Iterator
from contextlib import contextmanager

from celery import current_task, shared_task, signals

from qorven.agent.gateway import turns_here
from qorven.agent.tasks import turns_queue, turns_run
from qorven.runtime.cache_away import CACHE_RETRY_DELAY, cache_unreachable
from qorven.runtime.database import DATABASE_DOWN, DATABASE_RETRY_DELAY, connections_drop_broken
from qorven.runtime.log_context import log_context
from qorven.runtime.publish import publish_again_later, tasks_publish
from qorven.runtime.repeated_failure import RepeatedFailure
from qorven.runtime.task_scope import task_checkpoint_on
from tenancy.switches import switches_passed_on

from .adapters import adapter_for
from .delivery import deliveries_here, origins_here
from .sending import RetryLater, deliver_message
from .receive import InboundBusy, inbound_event, inbound_process
from .send_gate import WAIT as GATE_WAIT
from .send_gate import GateShut
from .sweep import DELIVERY_GRACE

logger = logging.getLogger(__name__)

INBOUND_BUSY_RETRIES = 300  # a minute of 0.2 s waits for the sender's earlier message


@shared_task(bind=True, name="channels_app.inbound", acks_late=True, max_retries=INBOUND_BUSY_RETRIES)
def inbound_process_task(self, tenant_id: int, event_id: int, reclaim: int | None = None) -> str:
    """Apply channel rules to a stored inbound event, then answer what it stored (the turn
    runs in this task, and its reply is sent from here). Safe to run twice. Comes back
    shortly while the same sender's earlier message is still being processed, and a
    second after a lost database connection (taking again the event it had claimed:
    `reclaim`)."""
    # The rules' read of the channel switch takes the tools' too, for the turn run here.
    with sends_at_the_end(), switches_passed_on():
        return _inbound_process(task=self, tenant_id=tenant_id, event_id=event_id, reclaim=reclaim)


def _inbound_process(*, task, tenant_id: int, event_id: int, reclaim: int | None = None) -> str:
    with log_context(tenant=tenant_id, event=event_id):
        turns: list[tuple[int, int]] = []
        try:
            event = inbound_event(tenant_id=tenant_id, event_id=event_id)
            if event is None:
                return "missing"
            with turns_here() as turns:
                result = inbound_process(event=event, reclaim=reclaim)
        except DATABASE_DOWN as exc:
            turns_queue(turns)  # what it did store is answered all the same
            connections_drop_broken()
            claimed = getattr(exc, "claimed_event", None) or reclaim  # not given back: ours to take again
            raise task.retry(exc=exc, args=(tenant_id, event_id), kwargs={"reclaim": claimed},
                             countdown=DATABASE_RETRY_DELAY) from None
        except InboundBusy:
            turns_queue(turns)  # the sender's earlier events it did store are answered all the same
            if task.request.retries >= INBOUND_BUSY_RETRIES:
                return "busy"  # left pending: the sweeper queues it again
            raise task.retry(countdown=0.2) from None
        except BaseException as exc:
            turns_queue(turns)
            if cache_unreachable(exc):  # transient: the event is pending again, taken on the retry
                raise task.retry(exc=exc, countdown=CACHE_RETRY_DELAY) from None
            raise
        turns_run(turns)  # answered here: one hop less than a turn task of its own
        return result


@shared_task(name="channels_app.inbound_fan_out", acks_late=True)
def inbound_fan_out_task(calls: list[list[int]]) -> int:
    """Queue the processing of each event of a burst a web process stored together (it
    published this one task for them: channels_app.receive.FAN_OUT_MIN). Safe to run
    twice: an event is processed once. One that is never queued (the broker refused) is
    queued again by the sweeper."""
    tasks_publish(inbound_process_task, calls)
    return len(calls)


# A send whose bot's gate is a key in the cache (QORVEN_SEND_GATES=cache) cannot send while
# Redis is away: it claims nothing, and comes back every CACHE_RETRY_DELAY seconds until
# the sweeper's grace for a waiting reply has passed, then leaves the reply, pending, to
# the sweeper, which queues it at each pass from then on: a long outage does not pile up
# a task per pass, each coming back for ever.
CACHE_AWAY_TRIES = int(DELIVERY_GRACE.total_seconds() / CACHE_RETRY_DELAY)
_cache_away = RepeatedFailure(logger, "a send cannot use the cache for its bot's send gate; it comes back "
                                      f"every {CACHE_RETRY_DELAY:.0f} s and sends nothing meanwhile")


@shared_task(bind=True, name="channels_app.deliver", acks_late=True, max_retries=None)
def deliver_message_task(self, tenant_id: int, message_id: int, sent: list[list] | None = None,
                         away: int = 0) -> int:
    """Send a message's parts, each once. A transient failure comes back after a backoff
    (or the platform's retry-after); the retries are counted on the parts, which end
    failed after QORVEN_SEND_RETRIES of them. While this worker's send slots are all
    busy it comes back shortly without trying (see channels_app.send_gate). After a lost
    database connection it comes back with the parts the platform took and nobody could
    record (`sent`: [part id, platform message id] pairs), and records them first. With
    the send gates in the cache and Redis away it comes back shortly (`away`: how many
    tries in a row met it so; CACHE_AWAY_TRIES)."""
    with log_context(tenant=tenant_id, message_id=message_id):
        try:
            done = deliver_message(tenant_id=tenant_id, message_id=message_id,
                                   worker=self.request.hostname or "local",
                                   sent_before=[(part, platform_id) for part, platform_id in sent or ()])
            _cache_away.succeeded()
            return done
        except GateShut:
            raise self.retry(countdown=GATE_WAIT) from None
        except DATABASE_DOWN as exc:
            connections_drop_broken()
            raise self.retry(exc=exc, args=(tenant_id, message_id), kwargs={"sent": _parts_sent(exc)},
                             countdown=DATABASE_RETRY_DELAY) from None
        except RetryLater as exc:
            raise self.retry(countdown=exc.after) from None
        except Exception as exc:
            if not cache_unreachable(exc):
                raise
            # Transient: nothing was claimed under a gate it could not take or renew (the
            # parts sent before are recorded; the rest are pending), so trying again
            # sends each part once.
            _cache_away.failed(type(exc).__name__)
            if away + 1 >= CACHE_AWAY_TRIES:
                logger.warning("message %s: the cache is still away; its send is left to the sweeper", message_id)
                return 0
            raise self.retry(exc=exc, args=(tenant_id, message_id), kwargs={"sent": sent, "away": away + 1},
                             countdown=CACHE_RETRY_DELAY) from None


@contextmanager
def sends_at_the_end() -> Iterator[None]:
    """Around a task's work: the platform sends it plans (channels_app.delivery.deliveries_here)
    are made by this task as the work ends — also when it ends in a retry or an error —
    instead of by a send task each. At a checkpoint (a turn going on to the session's next
    message) those planned so far are handed to the send task at once: they go out while
    the next message is answered, and a platform that hangs holds up the send task's slot,
    not the session's turns. Registered as a task scope (qorven.runtime.task_scope) for the
    tasks below the edges that write replies: a turn that waited for its session, a
    heartbeat's run."""
    deliveries: list[tuple[int, int]] = []

    def queue_so_far() -> None:
        for tenant_id, message_id in deliveries:
            _send_later(tenant_id, message_id, 0.0)
        del deliveries[:]

    try:
        with deliveries_here() as deliveries, origins_here(), task_checkpoint_on(queue_so_far):
            yield
    finally:
        request = getattr(current_task, "request", None)  # None outside a task (a direct call)
        deliveries_send(deliveries, worker=getattr(request, "hostname", None) or "local")


def deliveries_send(deliveries: list[tuple[int, int]], *, worker: str) -> None:
    """Send the replies collected by channels_app.delivery.deliveries_here from the calling
    task, as the send task would. One that cannot go now (no send slot free, a transient
    failure, a lost database connection, an error) goes to the send task with the wait the
    send task would have taken; never raises, so the calling task's outcome stands."""
    for tenant_id, message_id in deliveries:
        with log_context(tenant=tenant_id, message_id=message_id):
            later: float | None = None
            sent: list[list] | None = None
            try:
                deliver_message(tenant_id=tenant_id, message_id=message_id, worker=worker)
            except GateShut:
                later = GATE_WAIT
            except RetryLater as exc:
                later = exc.after
            except DATABASE_DOWN as exc:
                connections_drop_broken()
                later, sent = DATABASE_RETRY_DELAY, _parts_sent(exc)
            except Exception as exc:
                if cache_unreachable(exc):  # its bot's gate in the cache, Redis away: the send task comes back
                    _cache_away.failed(type(exc).__name__)
                    later = CACHE_RETRY_DELAY
                else:
                    logger.exception("message %s could not be sent from its turn; queued", message_id)
                    later = 0.0
            if later is not None:
                _send_later(tenant_id, message_id, later, sent=sent)


def _parts_sent(exc: BaseException) -> list[list] | None:
    """The parts a lost connection left sent and unrecorded (channels_app.sending), as a
    task's argument."""
    return [[part, platform_id] for part, platform_id in getattr(exc, "parts_sent", ())] or None


def _send_later(tenant_id: int, message_id: int, countdown: float, *, sent: list[list] | None = None) -> None:
    """The send task sends it; never raises. One the broker refused (Redis away,
    restarting) is tried again every second (qorven.runtime.publish.publish_again_later),
    so it goes as soon as the broker is back; past that its parts, pending, are the
    sweeper's."""
    kwargs = {"sent": sent} if sent else None
    try:
        deliver_message_task.apply_async((tenant_id, message_id), kwargs, countdown=countdown)
    except Exception as exc:
        logger.warning("the send of message %s could not be queued (%s); tried again as the broker comes back",
                       message_id, type(exc).__name__)
        publish_again_later(deliver_message_task, (tenant_id, message_id), kwargs, countdown=countdown)


@shared_task(bind=True, name="channels_app.plan_delivery", acks_late=True, max_retries=120)
def deliveries_plan_task(self, tenant_id: int, message_id: int) -> int:
    """Plan the delivery of a stored reply whose planning failed as it was appended (the
    database connection was lost). Safe to run twice: a part is planned once."""
    from sessions_app.models import Message

    from .delivery import deliveries_plan

    with log_context(tenant=tenant_id, message_id=message_id):
        try:
            message = Message.objects.filter(tenant_id=tenant_id, pk=message_id).first()
            return deliveries_plan(message=message) if message is not None else 0
        except DATABASE_DOWN as exc:
            connections_drop_broken()
            raise self.retry(exc=exc, countdown=DATABASE_RETRY_DELAY) from None


@shared_task(name="channels_app.wait_end", acks_late=True)
def wait_end_task(tenant_id: int, message_id: int) -> None:
    """Take away what the platform shows the sender of a message that will get no answer
    while they wait (a Discord /ask's deferred response). Best effort, once."""
    from sessions_app.models import Message

    from .one_off_targets import nothing_sent_to, one_off_target

    with log_context(tenant=tenant_id, message_id=message_id):
        message = Message.objects.filter(tenant_id=tenant_id, pk=message_id).first()
        found = one_off_target(message) if message is not None else None
        if found is not None and nothing_sent_to(*found):
            binding, target = found
            adapter_for(binding.kind).withdraw(binding, target)


@shared_task(name="channels_app.sweep", acks_late=True)
def sweep_task(restart: bool = False) -> dict[str, int]:
    """Queue again what a dead worker left behind (see channels_app.sweep). Run by Celery
    beat every QORVEN_SWEEP_INTERVAL seconds, by every worker as it starts, and with
    `restart` by `qorven serve` starting on the embedded default."""
    from dataclasses import asdict

    from .sweep import sweep

    return asdict(sweep(restart=restart))


@signals.worker_ready.connect(weak=False)
def _sweep_when_a_worker_starts(**kwargs) -> None:
    sweep_task.delay()

