"""The conversation store: sessions, their messages, and image attachments."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from tenancy.models import Qor, Tenant

from .channel_kinds import Channel


class Session(models.Model):
    class Kind(models.TextChoices):
        CANONICAL = "canonical"
        GROUP = "group"
        EMAIL = "email"
        SMS = "sms"
        VOICE = "voice"
        CRON = "cron"
        LEGACY = "legacy"

    class State(models.TextChoices):
        ACTIVE = "active"
        ARCHIVED = "archived"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="sessions")
    qor = models.ForeignKey(Qor, on_delete=models.CASCADE, related_name="sessions")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="qor_sessions"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # For non-canonical kinds: the channel and the platform's thread (chat id, email thread,
    # phone number, legacy sender id). Empty for the canonical chat.
    channel = models.CharField(max_length=16, choices=Channel.choices, blank=True, default="")
    external_thread_id = models.CharField(max_length=255, blank=True, default="")
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE)
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    seed_summary = models.TextField(blank=True, default="")
    last_seq = models.PositiveBigIntegerField(default=0)
    compacted_through_seq = models.PositiveBigIntegerField(default=0)
    compaction_note = models.TextField(blank=True, default="")
    # The agent's progress: user messages up to this seq have been answered.
    replied_through_seq = models.PositiveBigIntegerField(default=0)
    # A lease so turns on one session run one at a time across processes.
    turn_owner = models.CharField(max_length=64, blank=True, default="")
    turn_lease_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "qor", "user"],
                condition=Q(kind="canonical", state="active"),
                name="session_one_active_canonical",
            ),
            # A group chat (a legacy thread, keyed by its sender) is one session for
            # everyone in it; an email thread, an sms number, a call or a cron run is a
            # person's own: another member naming the same thread gets a session of theirs.
            models.UniqueConstraint(
                fields=["tenant", "qor", "kind", "channel", "external_thread_id"],
                condition=Q(state="active", kind__in=["group", "legacy"]),
                name="session_one_active_per_thread",
            ),
            models.UniqueConstraint(
                fields=["tenant", "qor", "user", "kind", "channel", "external_thread_id"],
                condition=Q(state="active") & ~Q(kind__in=["canonical", "group", "legacy"]),
                name="session_one_active_per_person_thread",
            ),
            models.CheckConstraint(
                condition=~Q(kind="canonical") | Q(user__isnull=False), name="session_canonical_has_user"
            ),
        ]
        indexes = [models.Index(fields=["tenant", "qor", "user", "kind", "state"], name="session_owner_idx")]

    def __str__(self) -> str:
        return f"{self.kind} session {self.pk} ({self.state})"


class MovedThread(models.Model):
    """A group chat the platform gave a new id (a Telegram group upgraded to a supergroup):
    its conversation is keyed by `new_thread` since `moved_at`, and a message still naming
    the old id — sent before the upgrade, taken after it — joins it there
    (sessions_app.thread_moves)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    qor = models.ForeignKey(Qor, on_delete=models.CASCADE, related_name="+")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    old_thread = models.CharField(max_length=255)
    new_thread = models.CharField(max_length=255)
    moved_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["moved_at"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "qor", "channel", "old_thread"], name="moved_thread_once"),
        ]

    def __str__(self) -> str:
        return f"{self.channel} {self.old_thread} → {self.new_thread}"


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"
        SYSTEM = "system"
        TOOL = "tool"

    class Answer(models.TextChoices):
        """Where a user message that expects a reply stands. Others (commands, group
        chatter, the Qor's own messages) have none."""

        PENDING = "pending"
        ANSWERED = "answered"
        FAILED = "failed"

    # No single-column indexes: (session, seq) and (tenant, external_scope, external_id)
    # already lead with these columns, and every extra index slows each append.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="messages", db_index=False)
    seq = models.PositiveBigIntegerField()
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True, default="")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    sender_name = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    # Dedupe: a platform's message id, unique within its scope (a channel binding, or a
    # user's API idempotency keys). Empty when the source gives none.
    external_scope = models.CharField(max_length=64, blank=True, default="")
    external_id = models.CharField(max_length=255, blank=True, default="")
    tool_calls = models.JSONField(null=True, blank=True)
    tool_call_id = models.CharField(max_length=128, blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True)
    # Nullable, so adding them never rewrites a long messages table.
    answer_state = models.CharField(max_length=8, choices=Answer.choices, null=True, blank=True)
    answer_attempts = models.PositiveSmallIntegerField(null=True, blank=True)
    # Why the answer failed, in the provider's own words: for the log and the admin only,
    # never read by a surface.
    answer_error = models.TextField(null=True, blank=True)
    # Moved on by a database trigger on every UPDATE of the row, whoever writes it (the ORM,
    # raw SQL): a reader holding a copy of the row knows it is unchanged while this is the
    # same (the worker's held prompt windows: qorven.agent.held_windows). NULL: never updated.
    revision = models.PositiveIntegerField(null=True, blank=True, editable=False)
    # True from the append of a reply or notice for a platform (sessions_app.services.append.
    # message_append: the same statement) until channels_app has planned its delivery,
    # whatever came of it; NULL for every other message and once planned. A process that
    # died between the two left it marked: the sweeper plans it then (channels_app.sweep).
    # Nullable, so adding it rewrote no row and marked none stored before.
    delivery_unplanned = models.BooleanField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["session", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="message_unique_seq"),
            models.UniqueConstraint(
                fields=["tenant", "external_scope", "external_id"],
                condition=~Q(external_id=""),
                name="message_unique_external_id",
            ),
        ]
        indexes = [
            models.Index(fields=["session", "channel", "created_at"], name="message_surface_time_idx"),
            models.Index(fields=["session", "channel", "seq"], name="message_surface_seq_idx"),
            # The few messages waiting for an answer: the next one of a session, and the
            # sessions the sweeper must look at.
            models.Index(fields=["session", "seq"], condition=Q(answer_state="pending"), name="message_pending_idx"),
            # The replies for a platform whose delivery is not planned yet, by time: a few rows,
            # for the sweeper to find one whose process died first. The condition compiles
            # to a bare `WHERE "delivery_unplanned"`, which a query must restate as is.
            models.Index(fields=["created_at"], condition=Q(delivery_unplanned=True), name="message_unplanned_idx"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.role}@{self.channel}"


class Image(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    message = models.ForeignKey(Message, on_delete=models.CASCADE, null=True, blank=True, related_name="images")
    mime_type = models.CharField(max_length=100)
    # The file's name as sent, for attachments that are not images (a PDF, a text file).
    name = models.CharField(max_length=255, blank=True, default="")
    data = models.TextField(help_text="Base64-encoded bytes.")
    size = models.PositiveIntegerField(help_text="Decoded size in bytes.")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Reading(models.TextChoices):
        TEXT = "text", "text read"
        NO_TEXT = "no_text", "no text layer"
        LOCKED = "locked", "password-protected"
        UNREADABLE = "unreadable", "could not be read"

    # A PDF's text as read once for the model (bounded; qorven.agent.pdf_text), and how that
    # went: both NULL until it is read (nullable, so adding them rewrites no row).
    text = models.TextField(null=True, blank=True)
    reading = models.CharField(max_length=12, choices=Reading.choices, null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.mime_type} ({self.size} bytes)"
