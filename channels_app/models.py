"""The edges: a Qor's accounts on external channels, who writes from them, pairing, what came in and went out."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from tenancy.models import Qor, Tenant, TimestampedModel
from tenancy.trust import Trust


class ChannelBinding(TimestampedModel):
    # Not a column: the credentials Qorven made up in the call that saved it (a webchat's
    # secret), for `qorven bind` to show once (channels_app.services.binding_create).
    generated: frozenset[str] = frozenset()

    class Kind(models.TextChoices):
        TELEGRAM = "telegram", "Telegram"
        WHATSAPP = "whatsapp", "WhatsApp"
        SLACK = "slack", "Slack"
        DISCORD = "discord", "Discord"
        EMAIL = "email", "Email"
        SMS = "sms", "SMS"
        WEBCHAT = "webchat", "Webchat"

    class UnpairedResponse(models.TextChoices):
        CODE = "code", "reply with a pairing code"
        SILENT = "silent", "issue a code without replying"
        IGNORE = "ignore", "ignore unknown senders"

    class GroupAnswers(models.TextChoices):
        PAIRED = "paired", "only people paired with the Qor"
        ANYONE = "anyone", "anyone in the group (at public trust)"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="bindings")
    qor = models.ForeignKey(Qor, on_delete=models.CASCADE, related_name="bindings")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    name = models.CharField(max_length=200, blank=True, default="")
    # How an inbound request finds this binding: Telegram's secret token, WhatsApp's
    # phone_number_id, Slack's team id, Discord's application id, the webchat public key…
    lookup_key = models.CharField(max_length=255)
    # Tokens, app secrets, signing keys, webhook secrets. Never shown in lists or written to logs.
    credentials = models.JSONField(default=dict, blank=True)
    # The SHA-256 of the secret a platform's handshake names the binding by, and nothing
    # else (WhatsApp's verify token): found by an index, not by reading every binding.
    verify_key = models.CharField(max_length=64, blank=True, default="", editable=False)
    unpaired_response = models.CharField(
        max_length=8, choices=UnpairedResponse.choices, default=UnpairedResponse.CODE
    )
    # Whose mention or reply the Qor answers in a group chat. Anyone can make a group and
    # add the bot: by default a stranger's message there is kept as the group's context
    # and never reaches the model (SPEC §3: unknown senders pair first).
    group_answers = models.CharField(
        max_length=8, choices=GroupAnswers.choices, default=GroupAnswers.PAIRED,
        help_text="Whose mention or reply the Qor answers in a group chat. Anyone else's message is kept "
                  "as the group's context, unanswered.",
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["tenant", "kind", "name"]
        constraints = [models.UniqueConstraint(fields=["kind", "lookup_key"], name="binding_unique_lookup")]
        indexes = [models.Index(fields=["kind", "verify_key"], name="binding_verify_idx",
                                condition=~models.Q(verify_key=""))]

    def __str__(self) -> str:
        return f"{self.kind}:{self.name or self.pk}"

    def __repr__(self) -> str:  # never leak credentials through a repr in a log line
        return f"<ChannelBinding {self.pk} {self.kind}>"


class Identity(TimestampedModel):
    class Approval(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        DENIED = "denied"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="identities")
    channel = models.CharField(max_length=16)
    external_id = models.CharField(max_length=255)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="identities"
    )
    display_name = models.CharField(max_length=200, blank=True, default="")
    # Where a message to this sender goes when it is not a reply (a heartbeat, say): the
    # platform's chat/channel id of their last direct message.
    # Text, not a short column: an email's target holds its subject and the thread's References.
    reply_target = models.TextField(blank=True, default="")
    trust_level = models.CharField(max_length=16, choices=Trust.choices, default=Trust.PAIRED)
    approval = models.CharField(max_length=16, choices=Approval.choices, default=Approval.PENDING)

    class Meta:
        ordering = ["tenant", "channel", "external_id"]
        verbose_name_plural = "identities"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "channel", "external_id"], name="identity_unique_sender")
        ]

    def __str__(self) -> str:
        # Not the external id (a phone number or an email address on some channels): the
        # admin's history keeps this name after the identity is deleted. The admin's list
        # and page show the external id beside it while the identity exists.
        return f"{self.channel} identity #{self.pk}"


class PairingRequest(TimestampedModel):
    class State(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        DENIED = "denied"
        EXPIRED = "expired"
        LOCKED = "locked"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="pairing_requests")
    identity = models.ForeignKey(Identity, on_delete=models.CASCADE, related_name="pairing_requests")
    channel = models.CharField(max_length=16)
    external_id = models.CharField(max_length=255)
    code = models.CharField(max_length=6)
    expires_at = models.DateTimeField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    locked_until = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_via = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant", "code", "state"], name="pairing_code_idx")]

    def __str__(self) -> str:
        return f"{self.channel} pairing #{self.pk} ({self.state})"  # see Identity.__str__


class InboundEvent(TimestampedModel):
    """A platform message as received, stored before the webhook answers: nothing is lost,
    and a platform's retry of the same message id is recognised here."""

    class State(models.TextChoices):
        PENDING = "pending"
        PROCESSING = "processing"
        DONE = "done"
        FAILED = "failed"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    binding = models.ForeignKey(ChannelBinding, on_delete=models.CASCADE, related_name="inbound_events")
    external_id = models.CharField(max_length=255)
    sender_id = models.CharField(max_length=255, blank=True, default="")
    payload = models.JSONField(help_text="The normalised InboundMessage; emptied once it is processed.")
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    result = models.CharField(max_length=64, blank=True, default="")
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["binding", "external_id"], name="inbound_unique_external_id")
        ]
        indexes = [
            # The few events not processed yet: a sender's earlier ones go first, and the
            # sweeper finds those a dead worker left behind.
            models.Index(fields=["binding", "sender_id", "id"],
                         condition=models.Q(state__in=["pending", "processing"]), name="inbound_pending_idx"),
            # The sweeper's look for finished events past QORVEN_INBOUND_RETENTION (and the admin's order).
            models.Index(fields=["created_at"], name="inbound_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.binding.kind}:{self.external_id} ({self.state})"


class OutboundDelivery(TimestampedModel):
    """One part of one message sent to a platform: the record that keeps a reply from
    being sent twice."""

    class State(models.TextChoices):
        PENDING = "pending"
        SENDING = "sending"  # in one task's hands right now
        SENT = "sent"
        FAILED = "failed"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    message = models.ForeignKey("sessions_app.Message", on_delete=models.CASCADE, related_name="deliveries")
    part = models.PositiveSmallIntegerField()
    binding = models.ForeignKey(ChannelBinding, on_delete=models.CASCADE, related_name="deliveries")
    target = models.TextField()  # as Identity.reply_target: an email's runs long
    text = models.TextField()
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    platform_message_id = models.CharField(max_length=255, blank=True, default="")
    last_error = models.TextField(blank=True, default="")
    sent_at = models.DateTimeField(null=True, blank=True)
    # After a transient failure: not tried again before this (its retry is scheduled then).
    not_before = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["message", "part"]
        verbose_name_plural = "outbound deliveries"
        constraints = [models.UniqueConstraint(fields=["message", "part"], name="delivery_unique_part")]
        indexes = [
            # The sweeper's look for sends a dead worker left behind.
            models.Index(fields=["updated_at"], condition=models.Q(state__in=["pending", "sending"]),
                         name="delivery_pending_idx"),
            # The next reply waiting for its binding's send gate (channels_app.send_gate).
            models.Index(fields=["binding", "id"], condition=models.Q(state="pending"), name="delivery_waiting_idx"),
            # A platform's later report on a part it accepted names it by its id (WhatsApp's statuses).
            models.Index(fields=["binding", "platform_message_id"], condition=~models.Q(platform_message_id=""),
                         name="delivery_platform_id_idx"),
            # The sweeper's look for sent parts past QORVEN_DELIVERY_RETENTION.
            models.Index(fields=["sent_at"], condition=models.Q(state="sent"), name="delivery_sent_idx"),
        ]

    def __str__(self) -> str:
        return f"message {self.message_id} part {self.part} ({self.state})"
