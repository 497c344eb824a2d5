"""Heartbeats: cron-scheduled sub-agents, mirrored onto django-celery-beat."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from qorven.models import Qor, Tenant, TimestampedModel
from sessions_app.channels import Channel


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
    timezone = models.CharField(max_length=64, blank=True, default="", help_text="Empty: the tenant's timezone.")
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
    last_duration_ms = models.PositiveIntegerField(null=True, blank=True)
    last_inputs_hash = models.CharField(max_length=64, blank=True, default="")
    tokens_spent = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["tenant", "qor", "name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "qor", "name"], name="heartbeat_unique_name")]

    def __str__(self) -> str:
        return self.name
