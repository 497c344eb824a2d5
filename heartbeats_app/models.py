"""Heartbeats: cron-scheduled sub-agents, mirrored onto django-celery-beat."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from sessions_app.channel_kinds import Channel
from tenancy.models import Qor, Tenant, TimestampedModel

CLEAR_IMAGES = "__qorven_clear_images__"
DELIVER_REMINDERS = "__qorven_reminders__"
CONVERSATION_RETENTION = "__qorven_retention__"
# Beats with these names run natively (no model call); see heartbeats_app/system_beats.py.
RESERVED_NAMES = frozenset({CLEAR_IMAGES, DELIVER_REMINDERS, CONVERSATION_RETENTION})


class Heartbeat(TimestampedModel):
    class Status(models.TextChoices):
        NEVER = "never"
        OK = "ok"
        NOOP = "noop"
        SKIPPED = "skipped"
        FAILED = "failed"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="heartbeats")
    qor = models.ForeignKey(Qor, on_delete=models.CASCADE, related_name="heartbeats")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        help_text="The user who made this beat; empty for config-owned beats.",
    )
    name = models.CharField(max_length=100)
    cron = models.CharField(max_length=100, help_text="Five fields: minute hour day-of-month month day-of-week.")
    timezone = models.CharField(
        max_length=64, blank=True, default="",
        help_text="Empty: its owner's timezone (the workspace's unless they set their own).",
    )
    prompt = models.TextField(blank=True, default="")
    deliver_to = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    deliver_channel = models.CharField(max_length=16, choices=Channel.choices, blank=True, default="")
    managed = models.BooleanField(default=False, help_text="Owned by heartbeats.default.json; read-only.")
    enabled = models.BooleanField(default=True)
    periodic_task = models.OneToOneField(
        "django_celery_beat.PeriodicTask", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_status = models.CharField(max_length=8, choices=Status.choices, default=Status.NEVER)
    last_output = models.TextField(blank=True, default="")
    last_error = models.TextField(blank=True, default="")
    # A failure's own text (a provider's words can carry a key fragment or the host's
    # address): the host's to read, hidden from tenant admins, who read last_error.
    last_error_detail = models.TextField(blank=True, default="")
    last_duration_ms = models.PositiveIntegerField(null=True, blank=True)
    last_inputs_hash = models.CharField(max_length=64, blank=True, default="")
    tokens_spent = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["tenant", "qor", "name"]
        constraints = [
            # A user's beats are named in their own space, so a name tells nobody that
            # another user has a beat by it; config-owned beats share one space per Qor.
            models.UniqueConstraint(fields=["tenant", "qor", "owner", "name"], condition=models.Q(owner__isnull=False),
                                    name="heartbeat_unique_name_per_owner"),
            models.UniqueConstraint(fields=["tenant", "qor", "name"], condition=models.Q(owner__isnull=True),
                                    name="heartbeat_unique_config_name"),
        ]

    def __str__(self) -> str:
        return self.name


class HeartbeatRun(models.Model):
    """One run of a beat for one scheduled tick. The unique (heartbeat, tick) row is the
    per-run lock: two beat processes sending the same tick get one run."""

    class Status(models.TextChoices):
        RUNNING = "running"
        OK = "ok"
        NOOP = "noop"
        SKIPPED = "skipped"
        FAILED = "failed"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    heartbeat = models.ForeignKey(Heartbeat, on_delete=models.CASCADE, related_name="runs")
    tick = models.DateTimeField(help_text="The scheduled time this run is for (a manual run: when it was asked).")
    manual = models.BooleanField(default=False)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.RUNNING)
    reason = models.CharField(
        max_length=32, blank=True, default="",
        help_text="Why a run was skipped (left, budget, offline, unchanged) or failed (unavailable, busy: its "
                  "capped route's every slot stayed taken, no model asked and no try used near its tick, interrupted, "
                  "cut_off, tool_rounds, suspended; empty: see its error), or why an ok run's answer is not whole "
                  "(cut_off, withheld: delivered as far as it went, with a notice). suspended: its retry came while "
                  "the host had suspended the workspace, so it is not tried again.",
    )
    attempts = models.PositiveSmallIntegerField(
        "tries used", default=1,
        help_text="Tries counted against the run's three. A wait for a busy capped route's slot near the tick is "
                  "not one (reason busy, the model not asked), so a run that only waited shows 0.",
    )
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    output = models.TextField(blank=True, default="")
    error = models.TextField(blank=True, default="")
    error_detail = models.TextField(blank=True, default="")  # the host's (see Heartbeat.last_error_detail)
    tokens = models.PositiveIntegerField(default=0)
    session = models.ForeignKey(
        "sessions_app.Session", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    delivered_message = models.ForeignKey(
        "sessions_app.Message", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-tick"]
        constraints = [models.UniqueConstraint(fields=["heartbeat", "tick"], name="heartbeat_run_unique_tick")]

    def __str__(self) -> str:
        return f"{self.heartbeat} @ {self.tick:%Y-%m-%d %H:%M} ({self.status})"
