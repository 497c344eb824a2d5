"""Reads of heartbeats. Missing and foreign beats raise the same HeartbeatNotFound."""
from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import User
from django.db.models import Q, QuerySet
from django.utils import timezone

from tenancy.models import Qor, Tenant
from tenancy.zones import person_zone_name

from .cron import CronError, cron_parse, tick_next, timezone_parse
from .errors import HeartbeatNotFound
from .models import Heartbeat, HeartbeatRun


def heartbeat_get(*, tenant: Tenant, heartbeat_id: int) -> Heartbeat:
    beat = (
        Heartbeat.objects.select_related("tenant", "qor", "deliver_to", "owner")
        .filter(tenant=tenant, pk=heartbeat_id)
        .first()
    )
    if beat is None:
        raise HeartbeatNotFound(heartbeat_id)
    return beat


def heartbeats_visible(*, tenant: Tenant, qor: Qor, user: User) -> QuerySet[Heartbeat]:
    """The beats a user sees with this Qor: their own, and config-owned beats that are
    not someone else's (no delivery target, or delivering to them)."""
    return (
        Heartbeat.objects.filter(tenant=tenant, qor=qor)
        .filter(Q(owner=user) | Q(managed=True, deliver_to__isnull=True) | Q(managed=True, deliver_to=user))
        .order_by("managed", "name")
    )


def heartbeat_for_user(*, tenant: Tenant, qor: Qor, user: User, name: str) -> Heartbeat:
    """A beat by name among those the user sees; raises HeartbeatNotFound otherwise."""
    beat = heartbeats_visible(tenant=tenant, qor=qor, user=user).filter(name=name).first()
    if beat is None:
        raise HeartbeatNotFound(name)
    return beat


def heartbeat_name_taken(
    *, tenant: Tenant, qor: Qor, name: str, owner: User | None = None, deliver_to: User | None = None,
    exclude_id: int | None = None,
) -> bool:
    """Whether `name` is taken where a beat of `owner` would live: among the beats they
    see (never another user's), or, for a config-owned beat, among the Qor's config-owned
    beats and the beats of whoever would see it (its recipient; with none, everyone)."""
    return heartbeat_name_clash(tenant=tenant, qor=qor, name=name, owner=owner, deliver_to=deliver_to,
                                exclude_id=exclude_id) is not None


def heartbeat_name_clash(
    *, tenant: Tenant, qor: Qor, name: str, owner: User | None = None, deliver_to: User | None = None,
    exclude_id: int | None = None,
) -> Heartbeat | None:
    """The beat that already has `name` where a beat of `owner` would live (see
    heartbeat_name_taken), with its owner; None when the name is free."""
    if owner is not None:
        qs = heartbeats_visible(tenant=tenant, qor=qor, user=owner)
    else:
        qs = Heartbeat.objects.filter(tenant=tenant, qor=qor)
        if deliver_to is not None:
            qs = qs.filter(Q(owner__isnull=True) | Q(owner=deliver_to))
    qs = qs.filter(name=name)
    if exclude_id is not None:
        qs = qs.exclude(pk=exclude_id)
    return qs.select_related("owner").order_by("pk").first()


def heartbeat_timezone(beat: Heartbeat) -> str:
    """The zone the beat runs in: its own, else its owner's (theirs, else the workspace's)."""
    return beat.timezone or person_zone_name(tenant=beat.tenant, user_id=beat.owner_id)


def heartbeat_next_run(beat: Heartbeat, *, now: datetime | None = None) -> datetime | None:
    """When the beat fires next (None when paused or its schedule is unusable): after now,
    or after the last run the beat counts from when that is later (a move west keeps the
    day's time already run, heartbeats_app.services._last_run_carried)."""
    if not beat.enabled:
        return None
    try:
        schedule = cron_parse(beat.cron, stored=True).schedule()
        zone = timezone_parse(heartbeat_timezone(beat))
    except CronError:
        return None
    after = now or timezone.now()
    counted_from = beat.periodic_task.last_run_at if beat.periodic_task is not None else None
    return tick_next(schedule, zone, max(after, counted_from) if counted_from is not None else after)


def heartbeat_runs(*, tenant: Tenant, heartbeat: Heartbeat, limit: int = 20) -> list[HeartbeatRun]:
    return list(HeartbeatRun.objects.filter(tenant=tenant, heartbeat=heartbeat).order_by("-tick")[:limit])


def heartbeats_of_person(
    *, tenant: Tenant, user: User, qor: Qor | None = None, after_id: int = 0, limit: int = 500
) -> list[Heartbeat]:
    """The beats the person made in `tenant` (with `qor` only, when given), by id after
    `after_id`; not the config-owned ones, which are the host's."""
    qs = Heartbeat.objects.filter(tenant=tenant, owner=user, pk__gt=after_id)
    if qor is not None:
        qs = qs.filter(qor=qor)
    return list(qs.select_related("qor").order_by("pk")[:limit])


def heartbeat_ids_of_person(*, tenant: Tenant, user: User) -> frozenset[int]:
    """The ids of the beats the person made in `tenant` (any Qor)."""
    return frozenset(Heartbeat.objects.filter(tenant=tenant, owner=user).values_list("pk", flat=True))
