"""Long-term memory and learned skills."""
from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q

from tenancy.models import Qor, Tenant, TimestampedModel
from tenancy.trust import Trust


class Memory(TimestampedModel):
    class Type(models.TextChoices):
        SUMMARY = "summary"
        FACT = "fact"
        LESSON = "lesson"
        REMINDER = "reminder"
        CONVERSATION_DIGEST = "conversation_digest"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memories")
    qor = models.ForeignKey(Qor, on_delete=models.CASCADE, related_name="memories")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="qor_memories"
    )
    type = models.CharField(max_length=24, choices=Type.choices)
    content = models.TextField()
    # SHA-256 of the normalised content: the same note is not stored twice for one user.
    content_hash = models.CharField(max_length=64)
    # What the full-text index reads instead of `content` when they differ: Chinese,
    # Japanese and Thai spaced out letter by letter, so their words can be found
    # (memory_app.fulltext.search_text). Written with `content` by the services; NULL: the
    # index reads `content`, so a memory in a space-separated language is not kept twice.
    search_text = models.TextField(null=True, blank=True, editable=False)
    channels = models.JSONField(default=list, blank=True)
    period_start = models.DateTimeField(null=True, blank=True)
    period_end = models.DateTimeField(null=True, blank=True)
    source_session = models.ForeignKey(
        "sessions_app.Session", on_delete=models.SET_NULL, null=True, blank=True, related_name="memories"
    )

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "memories"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "qor", "user", "type", "content_hash"], name="memory_unique_content"
            ),
        ]
        indexes = [models.Index(fields=["tenant", "qor", "user", "type"], name="memory_owner_idx")]

    @property
    def said_at(self) -> datetime:
        """When the person last said what this memory holds: a note drawn from a stretch of
        conversation (the memory flush, a digest), or said again later, by that stretch's
        end, however late it was stored; otherwise when it was stored. A reminder's period
        is its due time and its delivery instead, so it is dated when stored."""
        if self.type != self.Type.REMINDER and self.period_end is not None:
            return self.period_end
        return self.created_at

    def __str__(self) -> str:
        # No text: the admin's history (django_admin_log) keeps this name after the memory
        # is erased. The admin's list shows the text beside it (MemoryAdmin.short_content).
        return f"{self.type} #{self.pk}"


class LearnedSkill(TimestampedModel):
    """A skill from `plugins/skills/*.md` (tenant empty: every tenant) or made by an admin."""

    class Source(models.TextChoices):
        FILE = "file"
        ADMIN = "admin"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="skills")
    name = models.CharField(max_length=100)
    description = models.CharField(max_length=500)
    body = models.TextField()
    min_trust = models.CharField(max_length=16, choices=Trust.choices, default=Trust.PAIRED)
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.ADMIN)
    path = models.CharField(max_length=500, blank=True, default="")
    checksum = models.CharField(max_length=64, blank=True, default="")
    enabled = models.BooleanField(default=True)
    # The skill router (qorven.agent.router): a message matching one of these (a phrase, or
    # /a regular expression/) is answered with `reply` — after running `action` (a tool,
    # with `action_args`) when there is one — without a model call.
    triggers = models.JSONField(default=list, blank=True)
    reply = models.TextField(blank=True, default="")
    action = models.CharField(max_length=100, blank=True, default="")
    action_args = models.JSONField(default=dict, blank=True)

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        from .skills import SkillFileError, router_fields_check

        try:
            router_fields_check(triggers=self.triggers, reply=self.reply, action=self.action,
                                action_args=self.action_args)
        except SkillFileError as exc:
            raise ValidationError(str(exc)) from None

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="skill_unique_name_per_tenant"),
            models.UniqueConstraint(
                fields=["name"], condition=Q(tenant__isnull=True), name="skill_unique_shared_name"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class CompactRequest(TimestampedModel):
    """A `/compact` asked for and not finished yet (memory_app.compact_requests): kept so
    that the sweeper finishes one whose worker died, or reports it failed, rather than the
    person hearing nothing until the broker redelivers its task half an hour later."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    session = models.OneToOneField("sessions_app.Session", on_delete=models.CASCADE, related_name="+")
    channel = models.CharField(max_length=32)  # where it was asked: its outcome is told there
    tries = models.PositiveSmallIntegerField(default=0)  # queued again by the sweeper

    def __str__(self) -> str:
        return f"/compact of session #{self.session_id}"
