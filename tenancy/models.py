"""Tenancy: the hosting customer (Tenant), who belongs to it (Membership), its assistants (Qor)."""
from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models


def folder_validate(value: str) -> None:
    """A project folder is an absolute path to a folder that exists on this server."""
    from pathlib import Path

    path = Path(value)
    if not path.is_absolute() or not path.is_dir():
        raise ValidationError(f"{value!r} is not an absolute path to a folder on this server")


class TimestampedModel(models.Model):
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


def validate_timezone(name: str) -> None:
    """An IANA time zone name a person can choose ('Europe/Paris', 'UTC', 'US/Eastern'): not
    a folder of the tz database ('Europe'), nor one of its files that is no zone
    ('localtime', 'Factory', 'posix/Europe/Paris')."""
    from qorven.runtime.zone_names import zone_choosable

    if not zone_choosable(name):
        raise ValidationError(f"unknown timezone {name!r}; use an IANA name such as 'Europe/Paris' or 'UTC'",
                              code="timezone")


class Tenant(TimestampedModel):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=64, unique=True)
    # Every beat without a zone of its own runs in it, and due times are read in it.
    timezone = models.CharField(max_length=64, default="UTC", validators=[validate_timezone])
    settings = models.JSONField(default=dict, blank=True)
    monthly_token_budget = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Model tokens allowed per calendar month; empty = unlimited."
    )
    conversation_retention_days = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="Delete archived conversations (their messages and attachments) this many days after they "
                  "ended; empty = keep them. What the Qor remembers is kept.",
    )

    # Set by the host (the admin's action, `qorven tenant suspend`): every surface refuses
    # the tenant's people or goes quiet (tenancy.access), and nothing of it is deleted.
    suspended_at = models.DateTimeField(
        null=True, blank=True, editable=False,
        help_text="When the host suspended this workspace; empty = active. While suspended nobody in it is "
                  "served: pages, API tokens, sockets, the terminal and the webchat embed refuse them, beats do "
                  "not run, and what platforms send is kept unanswered.",
    )

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def suspended(self) -> bool:
        return self.suspended_at is not None


class Membership(TimestampedModel):
    class Role(models.TextChoices):
        OWNER = "owner"
        ADMIN = "admin"
        MEMBER = "member"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    timezone = models.CharField(
        max_length=64, blank=True, default="", validators=[validate_timezone],
        help_text="This person's timezone: the dates they are shown, the due times they give and their own "
                  "heartbeats follow it. Empty = the workspace's. They set it themselves with /timezone.",
    )

    class Meta:
        ordering = ["tenant", "user"]
        constraints = [models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique_user")]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class Qor(TimestampedModel):
    """An assistant of a tenant, with its prompt, model routes and tool allowlist."""

    class SummarizerMode(models.TextChoices):
        AUTO = "auto"
        MANUAL = "manual"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="qors")
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=64)
    system_prompt = models.TextField(blank=True, default="You are a helpful personal assistant.")
    project_context = models.TextField(blank=True, default="")
    project_folder = models.CharField(
        max_length=500, blank=True, default="", validators=[folder_validate],
        help_text="A folder on the server whose AGENTS.md (else CLAUDE.md, else README.md) is read into the "
                  "prompt as project context, re-read when it changes; empty: the project context above. Set by "
                  "the host's superusers.",
    )
    # Model routing per role. Empty values fall back to OPENAI_BASE_URL / QORVEN_MODEL.
    main_base_url = models.URLField(blank=True, default="")
    main_model = models.CharField(max_length=200, blank=True, default="")
    main_num_ctx = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: QORVEN_NUM_CTX.")
    main_vision = models.BooleanField(
        "main model sees images", default=False,
        help_text="Send the images people attach to the main model (it must accept image input). Off: the "
                  "model reads a note that an image was sent.",
    )
    main_max_concurrency = models.PositiveIntegerField(
        null=True, blank=True, help_text="Model calls at once to this server, across every process; more wait their "
                                         "turn. Empty: no cap.")
    main_api_key = models.CharField(
        "main API key", max_length=500, blank=True, default="",
        help_text="Sent only to this route's server. Empty: OPENAI_API_KEY, where the host trusts the server with it.",
    )
    summarizer_base_url = models.URLField(blank=True, default="")
    summarizer_model = models.CharField(max_length=200, blank=True, default="")
    summarizer_num_ctx = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: QORVEN_NUM_CTX.")
    summarizer_max_concurrency = models.PositiveIntegerField(
        null=True, blank=True, help_text="Model calls at once to this server, across every process; more wait their "
                                         "turn. Empty: no cap.")
    summarizer_api_key = models.CharField("summarizer API key", max_length=500, blank=True, default="",
                                      help_text="Empty: the main route's key, when the server is the main route's.")
    heartbeat_base_url = models.URLField(blank=True, default="")
    heartbeat_model = models.CharField(max_length=200, blank=True, default="")
    heartbeat_num_ctx = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: QORVEN_NUM_CTX.")
    heartbeat_max_concurrency = models.PositiveIntegerField(
        null=True, blank=True, help_text="Model calls at once to this server, across every process; more wait their "
                                         "turn. Empty: no cap.")
    heartbeat_api_key = models.CharField("heartbeat API key", max_length=500, blank=True, default="",
                                      help_text="Empty: the main route's key, when the server is the main route's.")
    # Speech to text for voice notes (OpenAI-compatible /audio/transcriptions). No model:
    # off, and the Qor says it cannot listen to voice notes yet.
    transcriber_base_url = models.URLField(blank=True, default="", help_text="Empty: the main route's base URL.")
    transcriber_model = models.CharField(
        max_length=200, blank=True, default="", help_text="e.g. whisper-1. Empty: voice notes are not transcribed."
    )
    transcriber_api_key = models.CharField("transcriber API key", max_length=500, blank=True, default="",
                                           help_text="Empty: the main route's key, when the server is the main route's.")
    tool_allowlist = models.JSONField(
        default=list, blank=True, help_text="Tool names this Qor may use; empty = every enabled tool."
    )
    summarizer_mode = models.CharField(max_length=8, choices=SummarizerMode.choices, default=SummarizerMode.AUTO)
    compact_threshold = models.FloatField(
        default=0.9, validators=[MinValueValidator(0.1), MaxValueValidator(1.0)]
    )
    is_default = models.BooleanField(default=False)

    class Meta:
        ordering = ["tenant", "slug"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "slug"], name="qor_unique_slug"),
            models.UniqueConstraint(
                fields=["tenant"], condition=models.Q(is_default=True), name="qor_one_default_per_tenant"
            ),
        ]

    def clean(self) -> None:
        """A model server stored here must be one this server may call (see
        qorven.runtime.outbound); checked again before every call."""
        from django.core.exceptions import ValidationError

        from qorven.runtime.outbound import AddressRefused, check_url

        errors = {}
        for field in ("main_base_url", "summarizer_base_url", "heartbeat_base_url", "transcriber_base_url"):
            url = getattr(self, field)
            if url:
                try:
                    check_url(url)
                except AddressRefused as exc:
                    errors[field] = str(exc)
        if errors:
            raise ValidationError(errors)

    def route_target(self, role: str) -> tuple[str, str, bool]:
        """Where a role's model calls go: (base URL, model, whether the URL is stored on this
        Qor). A role's empty field falls back to the main route's, then to the host's
        OPENAI_BASE_URL and QORVEN_MODEL (qorven.llm.routes builds the whole route on this)."""
        stored = getattr(self, f"{role}_base_url") or self.main_base_url
        model = getattr(self, f"{role}_model") or self.main_model or settings.QORVEN_MODEL
        return stored or settings.OPENAI_BASE_URL, model, bool(stored)

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.slug}"


class ModelFallback(TimestampedModel):
    """A model server one role of a Qor falls back to, in `position` order, while the
    routes before it are down or rate-limited (qorven.llm.failover)."""

    class Role(models.TextChoices):
        MAIN = "main"
        SUMMARIZER = "summarizer"
        HEARTBEAT = "heartbeat"

    qor = models.ForeignKey(Qor, on_delete=models.CASCADE, related_name="model_fallbacks")
    role = models.CharField(max_length=12, choices=Role.choices, default=Role.MAIN)
    position = models.PositiveSmallIntegerField(default=1)
    base_url = models.URLField()
    model = models.CharField(max_length=200)
    num_ctx = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: the role's context size.")
    max_concurrency = models.PositiveIntegerField(null=True, blank=True,
                                                  help_text="Model calls at once to this server. Empty: no cap.")
    api_key = models.CharField("API key", max_length=500, blank=True, default="",
                               help_text="Sent only to this server. Empty: no key (or OPENAI_API_KEY where the host "
                                         "trusts the server with it).")

    class Meta:
        ordering = ["qor", "role", "position", "pk"]

    def __str__(self) -> str:
        return f"{self.role} fallback {self.position}: {self.model}"

    def clean(self) -> None:
        from qorven.runtime.outbound import AddressRefused, check_url

        try:
            check_url(self.base_url)
        except AddressRefused as exc:
            raise ValidationError({"base_url": str(exc)}) from None


class McpServer(TimestampedModel):
    """An MCP server whose tools a Qor may use (qorven.agent.mcp): over streamable HTTP (a
    URL and an optional bearer token) or stdio (a command this server runs, so only the
    host's superusers add those)."""

    class Kind(models.TextChoices):
        HTTP = "http", "streamable HTTP"
        STDIO = "stdio", "stdio (a command on this server)"

    qor = models.ForeignKey(Qor, on_delete=models.CASCADE, related_name="mcp_servers")
    name = models.SlugField(max_length=32, help_text="Its tools are named mcp:<name>:<tool> in the allowlist.")
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.HTTP)
    url = models.URLField(blank=True, default="", help_text="Streamable HTTP: the server's MCP endpoint.")
    bearer_token = models.CharField(max_length=500, blank=True, default="",
                                    help_text="Streamable HTTP: sent as Authorization: Bearer. Never shown again.")
    command = models.JSONField(default=list, blank=True,
                               help_text='stdio: the command and its arguments, e.g. ["uvx", "mcp-server-time"].')
    enabled = models.BooleanField(default=True)
    min_trust = models.CharField(
        max_length=8, default="owner", choices=[("public", "public"), ("paired", "paired"), ("trusted", "trusted"),
                                                ("owner", "owner")],
        help_text="The least trusted surface offered this server's tools.")
    tools = models.JSONField(default=list, blank=True, editable=False,
                             help_text="The server's tools as last listed (name, description, input schema).")
    tools_listed_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["qor", "name"]
        constraints = [models.UniqueConstraint(fields=["qor", "name"], name="mcp_server_unique_name")]

    def __str__(self) -> str:
        return f"MCP {self.name} ({self.kind})"

    def save(self, *args, **kwargs) -> None:
        if not kwargs.get("update_fields"):  # saved in the admin: its tools are listed again on next use
            self.tools_listed_at = None
        super().save(*args, **kwargs)

    def clean(self) -> None:
        from qorven.runtime.outbound import AddressRefused, check_url

        if self.kind == self.Kind.HTTP:
            if not self.url:
                raise ValidationError({"url": "A streamable HTTP server needs its URL."})
            try:
                check_url(self.url)
            except AddressRefused as exc:
                raise ValidationError({"url": str(exc)}) from None
        elif not (isinstance(self.command, list) and self.command and all(isinstance(a, str) for a in self.command)):
            raise ValidationError({"command": "A stdio server needs its command as a list of strings."})


class ApiToken(models.Model):
    """A per-user bearer token for the JSON API. Only its SHA-256 digest is stored."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_tokens")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True, default="")
    prefix = models.CharField(max_length=12, help_text="First characters, to tell tokens apart.")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="It stops working then (empty: never).")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user} in {self.tenant})"


class Usage(models.Model):
    """Model tokens spent, per tenant, Qor, role, route and day."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="usage")
    qor = models.ForeignKey(Qor, on_delete=models.CASCADE, related_name="usage")
    role = models.CharField(max_length=16)
    # Which of the role's routes answered ("main fallback 1"), when the role has several.
    route = models.CharField(max_length=40, blank=True, default="")
    day = models.DateField()
    calls = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-day", "tenant", "qor", "role"]
        verbose_name_plural = "usage"
        constraints = [models.UniqueConstraint(fields=["tenant", "qor", "role", "route", "day"],
                                               name="usage_unique_route_day")]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.qor.slug} {self.role} {self.day}"


class PluginSetting(TimestampedModel):
    """Per-tenant switch for a tool or a channel. A missing row means the default (enabled)."""

    class Kind(models.TextChoices):
        TOOL = "tool"
        CHANNEL = "channel"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="plugin_settings")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    name = models.CharField(max_length=64)
    enabled = models.BooleanField(default=True)

    class Meta:
        db_table = "channels_app_pluginsetting"  # the table it had in channels_app: nothing is moved
        ordering = ["tenant", "kind", "name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "kind", "name"], name="plugin_unique_name")]

    def __str__(self) -> str:
        return f"{self.kind}:{self.name} {'on' if self.enabled else 'off'}"
