"""Writes of heartbeats. Every beat is mirrored one-to-one onto a django-celery-beat
PeriodicTask (with a CrontabSchedule in the beat's timezone) in the same transaction, so
Celery beat's DatabaseScheduler runs exactly what the Heartbeat table says."""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone as django_timezone
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from qorven.runtime.scheduled_backups import BACKUP_TASK
from sessions_app.channel_kinds import CHAT_FAMILY
from tenancy.models import Membership, Qor, Tenant
from tenancy.zones import person_zone_name

from .cron import CronError, cron_parse, cron_same, timezone_choose, timezone_parse
from .errors import HeartbeatInvalid, HeartbeatReadOnly
from .models import RESERVED_NAMES, Heartbeat, HeartbeatRun
from .selectors import heartbeat_name_clash, heartbeat_timezone

RUN_TASK = "heartbeats_app.run"
RESERVED_PREFIX = "__qorven_"
# The host's scheduled backups: one PeriodicTask for the whole install, no tenant's and no
# Heartbeat's (the orphan sweep below looks at heartbeat runs only).
BACKUP_BEAT = "__qorven_backup__"
BACKUP_DESCRIPTION = ("The host's scheduled backups into QORVEN_BACKUP_DIR (managed by Qorven: set "
                      "QORVEN_BACKUP_SCHEDULE; changes made here are undone when the beat starts)")
NAME_MAX = 100


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def heartbeat_check(
    *,
    tenant: Tenant,
    qor: Qor,
    name: str,
    cron: str,
    prompt: str,
    timezone: str,
    owner: User | None,
    deliver_to: User | None,
    deliver_channel: str,
    system: bool,
    exclude_id: int | None = None,
    stored_cron: str | None = None,
    reader: User | None = UNSET,
) -> str:
    """Check a beat's fields as create/update will; returns the normalised cron
    expression. Raises HeartbeatInvalid naming the field at fault. `system` allows the
    reserved system-beat names (the defaults file, a superuser). `stored_cron`: the beat's
    cron as saved; `cron` the same expression, however spaced, is the beat's own, unchanged
    (see cron_parse's `stored`). `reader`: who reads the refusal (by default the owner; an
    admin, or None for the defaults file's operator)."""
    if qor.tenant_id != tenant.pk:
        raise HeartbeatInvalid("qor", "that Qor belongs to another tenant")
    name = name.strip() if isinstance(name, str) else ""
    if not name:
        raise HeartbeatInvalid("name", "a beat needs a name")
    if len(name) > NAME_MAX:
        raise HeartbeatInvalid("name", f"a beat's name is at most {NAME_MAX} characters")
    if name.startswith(RESERVED_PREFIX):
        if name not in RESERVED_NAMES:
            raise HeartbeatInvalid("name", f"names starting with {RESERVED_PREFIX!r} are reserved")
        if not system:
            raise HeartbeatInvalid("name", f"{name!r} is a reserved system beat; only the host can create it")
    try:
        parsed = cron_parse(cron, stored=stored_cron is not None and cron_same(cron, stored_cron))
    except CronError as exc:
        raise HeartbeatInvalid("cron", str(exc)) from None
    try:
        if timezone:
            timezone_choose(timezone)
        else:
            timezone_parse(person_zone_name(tenant=tenant, user_id=owner.pk if owner else None))
    except CronError as exc:
        # Without a zone of its own a beat runs in its workspace's, which may predate the
        # check on saving it.
        raise HeartbeatInvalid("timezone", str(exc) if timezone else
                               f"this workspace's timezone is not usable: {exc}; name one for the beat") from None
    if name not in RESERVED_NAMES and not (prompt or "").strip():
        raise HeartbeatInvalid("prompt", "a beat needs a prompt: what should the Qor check or say?")
    if bool(deliver_to) != bool(deliver_channel):
        raise HeartbeatInvalid(
            "deliver_channel", "a delivery target needs both a user and a channel (or neither, to only record)"
        )
    if deliver_channel and deliver_channel not in CHAT_FAMILY:
        raise HeartbeatInvalid(
            "deliver_channel",
            f"cannot deliver on {deliver_channel!r}; use one of: {', '.join(sorted(CHAT_FAMILY))}",
        )
    # Whether each is an active member, as stored now: the User given may have been read
    # before they were deactivated (an admin form checked, then saved).
    active = dict(Membership.objects.filter(tenant=tenant, user__in=[u for u in (owner, deliver_to) if u])
                  .values_list("user_id", "user__is_active"))
    for field, user in (("owner", owner), ("deliver_to", deliver_to)):
        if user is not None and user.pk not in active:
            raise HeartbeatInvalid(field, f"{user} is not a member of {tenant.slug}")
    if owner is not None and not active[owner.pk]:
        raise HeartbeatInvalid("owner", f"{owner} is deactivated: a beat runs in its owner's name, and a "
                               "deactivated account has left; choose someone active as its owner")
    if deliver_to is not None and not active[deliver_to.pk]:
        raise HeartbeatInvalid("deliver_to", f"{deliver_to} is deactivated: nothing is delivered to a deactivated "
                               "account; choose someone active, or no delivery")
    clash = heartbeat_name_clash(tenant=tenant, qor=qor, name=name, owner=owner, deliver_to=deliver_to,
                                 exclude_id=exclude_id)
    if clash is not None:
        raise HeartbeatInvalid("name", _name_taken(name, clash, owner=owner, reader=owner if reader is UNSET else reader))
    return parsed.expression


def _name_taken(name: str, clash: Heartbeat, *, owner: User | None, reader: User | None) -> str:
    """Why `name` is taken, told to whoever reads it: the person the beat is for (the beat
    tools: "you"), an admin, or the operator syncing the defaults file (no one: None)."""
    if clash.owner is None:
        whose = "a beat of the heartbeats defaults file" if clash.managed else "a workspace beat (one with no owner)"
        return f"{name!r} is already the name of {whose}; pick another name"
    if reader is not None and clash.owner_id == reader.pk:
        return f"you already have a beat named {name!r}; pick another name"
    also = "" if owner is not None and clash.owner_id == owner.pk else " and would see this one too"
    return f"{clash.owner} already has a beat named {name!r}{also}; pick another name"


@transaction.atomic
def heartbeat_create(
    *,
    tenant: Tenant,
    qor: Qor,
    name: str,
    cron: str,
    prompt: str = "",
    timezone: str = "",
    owner: User | None = None,
    deliver_to: User | None = None,
    deliver_channel: str = "",
    enabled: bool = True,
    managed: bool = False,
    system: bool = False,
    reader: User | None = UNSET,
) -> Heartbeat:
    """Create a beat and its PeriodicTask. `managed` marks a config-owned beat (the defaults
    file); `system` lets the host (defaults file, superuser) use reserved names.
    Raises HeartbeatInvalid."""
    cron = heartbeat_check(
        tenant=tenant, qor=qor, name=name, cron=cron, prompt=prompt, timezone=timezone, owner=owner,
        deliver_to=deliver_to, deliver_channel=deliver_channel, system=system or managed, reader=reader,
    )
    beat = Heartbeat.objects.create(
        tenant=tenant, qor=qor, name=name.strip(), cron=cron, prompt=prompt.strip(), timezone=timezone,
        owner=owner, deliver_to=deliver_to, deliver_channel=deliver_channel, enabled=enabled, managed=managed,
    )
    _mirror(beat)
    return beat


@transaction.atomic
def heartbeat_update(
    *,
    heartbeat: Heartbeat,
    name: str = UNSET,
    cron: str = UNSET,
    prompt: str = UNSET,
    timezone: str = UNSET,
    owner: User | None = UNSET,
    deliver_to: User | None = UNSET,
    deliver_channel: str = UNSET,
    enabled: bool = UNSET,
    allow_managed: bool = False,
    system: bool = False,
    reader: User | None = UNSET,
) -> Heartbeat:
    """Change the given fields of a beat and its PeriodicTask together (a beat given to
    another owner with no zone of its own moves to theirs). Managed beats are
    read-only unless `allow_managed` (the defaults-file sync). Raises HeartbeatInvalid or
    HeartbeatReadOnly."""
    beat = _locked(heartbeat, allow_managed=allow_managed)
    def pick(value: Any, current: Any) -> Any:
        return current if value is UNSET else value

    new_name: str = pick(name, beat.name)
    new_prompt: str = pick(prompt, beat.prompt) or ""
    new_timezone: str = pick(timezone, beat.timezone) or ""
    new_owner: User | None = pick(owner, beat.owner)
    new_deliver_to: User | None = pick(deliver_to, beat.deliver_to)
    new_channel: str = pick(deliver_channel, beat.deliver_channel) or ""
    new_cron = heartbeat_check(
        tenant=beat.tenant, qor=beat.qor, name=new_name, cron=pick(cron, beat.cron), prompt=new_prompt,
        timezone=new_timezone, owner=new_owner, deliver_to=new_deliver_to, deliver_channel=new_channel,
        system=system or beat.managed or beat.name == new_name, exclude_id=beat.pk,
        stored_cron=beat.cron, reader=reader,
    )
    merged: dict[str, Any] = {
        "name": new_name.strip(), "cron": new_cron, "prompt": new_prompt.strip(), "timezone": new_timezone,
        "owner": new_owner, "deliver_to": new_deliver_to, "deliver_channel": new_channel,
    }
    if enabled is not UNSET:
        merged["enabled"] = bool(enabled)
    fields = [f for f, v in merged.items() if getattr(beat, f) != v]
    for f in fields:
        setattr(beat, f, merged[f])
    if {"prompt", "owner", "deliver_to"} & set(fields):
        beat.last_inputs_hash = ""  # new inputs: the next run calls the model
        fields.append("last_inputs_hash")
    if fields:
        beat.save(update_fields=[*fields, "updated_at"])
        _mirror(beat)
    return beat


@transaction.atomic
def heartbeat_set_enabled(*, heartbeat: Heartbeat, enabled: bool, allow_managed: bool = False) -> Heartbeat:
    """Pause or resume a beat (its PeriodicTask follows)."""
    beat = _locked(heartbeat, allow_managed=allow_managed)
    if beat.enabled != enabled:
        beat.enabled = enabled
        beat.save(update_fields=["enabled", "updated_at"])
        _mirror(beat)
    return beat


@transaction.atomic
def heartbeat_delete(*, heartbeat: Heartbeat, allow_managed: bool = False) -> None:
    """Delete a beat, its PeriodicTask and its run history."""
    beat = _locked(heartbeat, allow_managed=allow_managed)
    task = beat.periodic_task
    crontab_id = task.crontab_id if task is not None else None
    beat.delete()
    if task is not None:
        task.delete()
    _drop_unused_crontab(crontab_id)


@transaction.atomic
def heartbeats_retime(*, tenant: Tenant, owner: User | None = None) -> int:
    """Re-mirror the beats that follow a timezone that changed — the tenant's, or with
    `owner` the person's own — so their schedules fire at the new local time. Returns how many."""
    following = Heartbeat.objects.select_related("tenant", "qor", "periodic_task").filter(tenant=tenant, timezone="")
    if owner is not None:
        following = following.filter(owner=owner)
    beats = list(following)
    for beat in beats:
        _mirror(beat)
    return len(beats)


@transaction.atomic
def periodic_task_orphans_delete() -> int:
    """Delete heartbeat PeriodicTasks whose beat is gone (a tenant or Qor was deleted and
    the beat with it): they would only wake a worker to find nothing to run."""
    used = Heartbeat.objects.filter(periodic_task__isnull=False).values("periodic_task_id")
    orphans = list(PeriodicTask.objects.filter(task=RUN_TASK).exclude(pk__in=used))
    for task in orphans:
        crontab_id = task.crontab_id
        task.delete()
        _drop_unused_crontab(crontab_id)
    return len(orphans)


@transaction.atomic
def backup_beat_sync() -> str:
    """Make the host-wide backup PeriodicTask say what QORVEN_BACKUP_SCHEDULE says (in
    QORVEN_TIME_ZONE): created, its schedule changed (first run at the new schedule's next
    time), or deleted when the setting is empty. Returns what was done: "created",
    "updated", "removed" or "" (it already did)."""
    from django.conf import settings

    task = PeriodicTask.objects.select_for_update().filter(name=BACKUP_BEAT).first()
    if not settings.QORVEN_BACKUP_SCHEDULE:
        if task is None:
            return ""
        crontab_id = task.crontab_id
        task.delete()
        _drop_unused_crontab(crontab_id)
        return "removed"
    parsed = cron_parse(settings.QORVEN_BACKUP_SCHEDULE)
    schedule = CrontabSchedule.objects.filter(**parsed.fields(), timezone=settings.TIME_ZONE).first()
    if schedule is None:
        schedule = CrontabSchedule.objects.create(**parsed.fields(), timezone=settings.TIME_ZONE)
    wanted = {"task": BACKUP_TASK, "crontab_id": schedule.pk, "interval_id": None, "args": "[]", "kwargs": "{}",
              "enabled": True, "one_off": False, "description": BACKUP_DESCRIPTION}
    if task is None:
        PeriodicTask.objects.create(name=BACKUP_BEAT, **wanted)
        return "created"
    if all(getattr(task, field) == value for field, value in wanted.items()):
        return ""
    old_crontab_id = task.crontab_id
    for field, value in wanted.items():
        setattr(task, field, value)
    if old_crontab_id != schedule.pk:
        task.last_run_at = None  # the backup counts from this change (the row's date_changed)
    task.save()
    if old_crontab_id != schedule.pk:
        _drop_unused_crontab(old_crontab_id)
    return "updated"


def heartbeat_run_now(*, heartbeat: Heartbeat) -> None:
    """Queue a run of the beat now (after the current transaction commits), whatever its
    schedule; it counts as its own tick."""
    from celery import current_app

    # By name, as beat sends it: the run is the agent's (qorven.agent.tasks), above this app.
    tenant_id, beat_id = heartbeat.tenant_id, heartbeat.pk
    transaction.on_commit(lambda: current_app.send_task(RUN_TASK, args=(tenant_id, beat_id), kwargs={"manual": True}))


def _locked(heartbeat: Heartbeat, *, allow_managed: bool) -> Heartbeat:
    beat = Heartbeat.objects.select_for_update(of=("self",)).select_related("tenant", "qor", "periodic_task").get(
        pk=heartbeat.pk
    )
    if beat.managed and not allow_managed:
        raise HeartbeatReadOnly(
            f"{beat.name!r} is managed by the heartbeats defaults file and is read-only; change it there"
        )
    return beat


def _mirror(beat: Heartbeat) -> None:
    """Make the beat's PeriodicTask say what the beat says: schedule, timezone, enabled."""
    parsed = cron_parse(beat.cron, stored=True)
    if not beat.timezone and beat.owner_id is not None:
        # The owner's zone is read under their membership's lock, as membership_timezone_set
        # changes it and moves their beats: a beat written meanwhile waits, then reads the
        # new zone, rather than writing the one they left over the move.
        list(Membership.objects.select_for_update().filter(tenant_id=beat.tenant_id, user_id=beat.owner_id)
             .values_list("pk", flat=True))
    zone = heartbeat_timezone(beat)
    schedule = CrontabSchedule.objects.filter(**parsed.fields(), timezone=zone).first()
    if schedule is None:
        schedule = CrontabSchedule.objects.create(**parsed.fields(), timezone=zone)
    kwargs = json.dumps({"tenant_id": beat.tenant_id, "heartbeat_id": beat.pk})
    name = f"heartbeat {beat.pk}: {beat.tenant.slug}/{beat.qor.slug} {beat.name}"[:200]
    task = beat.periodic_task
    if task is None:
        task = PeriodicTask.objects.create(
            name=name, task=RUN_TASK, crontab=schedule, kwargs=kwargs, enabled=beat.enabled,
            description=f"Heartbeat {beat.name!r} of {beat.tenant.slug}/{beat.qor.slug} (managed by Qorven)",
        )
        beat.periodic_task = task
        beat.save(update_fields=["periodic_task", "updated_at"])
        return
    old_crontab_id = task.crontab_id
    # The zone it runs in as stored now: a retime may have replaced (and dropped) the schedule
    # this task was read with while this write waited for the owner's membership.
    old_zone = PeriodicTask.objects.filter(pk=task.pk).values_list("crontab__timezone", flat=True).first()
    wanted = {"name": name, "task": RUN_TASK, "crontab_id": schedule.pk, "kwargs": kwargs, "enabled": beat.enabled}
    if any(getattr(task, f) != v for f, v in wanted.items()):
        for f, v in wanted.items():
            setattr(task, f, v)
        if old_crontab_id != schedule.pk:
            task.last_run_at = _last_run_carried(task, beat=beat, old_zone=str(old_zone) if old_zone else None,
                                                 new_zone=zone)
        task.save()
    if old_crontab_id != schedule.pk:
        _drop_unused_crontab(old_crontab_id)


def _last_run_carried(task: PeriodicTask, *, beat: Heartbeat, old_zone: str | None, new_zone: str) -> datetime:
    """The last run a beat whose schedule changed counts from: one run per local date and
    time. The beat finds a task due when its schedule has a time between the last run and
    now, so from the old schedule's last run a new time (or zone) that passed since would
    run at once. It counts from now, then, or, when the zone moved west, from the last
    run's date and time read on the new zone's clock: a daily 09:00 that ran in Berlin
    has had that day's 09:00, which New York reaches six hours later the same date."""
    now = django_timezone.now()
    ran = [t for t in (task.last_run_at, HeartbeatRun.objects.filter(tenant_id=beat.tenant_id, heartbeat=beat, manual=False)
                       .order_by("-tick").values_list("tick", flat=True).first()) if t is not None]
    if not ran or old_zone is None or old_zone == new_zone:
        return now
    wall = max(ran).astimezone(ZoneInfo(old_zone)).replace(tzinfo=None)
    return max(now, wall.replace(tzinfo=ZoneInfo(new_zone)))


def _drop_unused_crontab(crontab_id: int | None) -> None:
    # Schedules are shared by equal specs; delete one only when nothing uses it any more
    # (a PeriodicTask's crontab foreign key cascades, so a used one must stay).
    if crontab_id is not None and not PeriodicTask.objects.filter(crontab_id=crontab_id).exists():
        CrontabSchedule.objects.filter(pk=crontab_id).delete()
