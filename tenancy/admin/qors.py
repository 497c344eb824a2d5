"""The admin's Qor pages: the Qor, its model routes and their state now, its fallbacks
(the host's) and MCP servers; model keys are write-only."""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from qorven.runtime.cooldowns import route_state

from ..admin_scoping import TenantScopedAdminMixin, TenantScopedInlineMixin
from ..model_keys import role_api_key, route_key
from ..models import McpServer, ModelFallback, Qor


CLEAR_KEY = "-"  # typed into a key field: remove the stored key


class KeysWriteOnly(forms.ModelForm):
    """Model API keys are write-only: the form never shows one back; an empty field keeps
    the stored key, a new one replaces it, "-" removes it."""

    KEYS: tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in self.KEYS:
            field = self.fields.get(name)
            if field is None:
                continue
            field.widget = forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"})
            stored = bool(self.instance.pk and getattr(self.instance, name))
            field.help_text = (f"{'Set (hidden). Leave empty to keep it; type - to remove it. ' if stored else ''}"
                               f"{field.help_text}")

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        for name in self.KEYS:
            if name not in self.fields:
                continue
            typed = (cleaned.get(name) or "").strip()
            if typed == CLEAR_KEY:
                cleaned[name] = ""
            elif not typed and self.instance.pk:
                cleaned[name] = getattr(type(self.instance).objects.get(pk=self.instance.pk), name)
            else:
                cleaned[name] = typed
        return cleaned


class QorForm(KeysWriteOnly):
    KEYS = ("main_api_key", "summarizer_api_key", "heartbeat_api_key", "transcriber_api_key")


class ModelFallbackForm(KeysWriteOnly):
    KEYS = ("api_key",)


class ModelFallbackInline(admin.TabularInline):
    """Shown to the host's superusers only (model servers belong to the host)."""

    model = ModelFallback
    form = ModelFallbackForm
    extra = 0
    fields = ["role", "position", "base_url", "model", "num_ctx", "max_concurrency", "api_key", "cooldown"]
    readonly_fields = ["cooldown"]

    @admin.display(description="state")
    def cooldown(self, obj: ModelFallback) -> str:
        if not obj.pk:
            return "—"
        return route_state(base_url=obj.base_url, model=obj.model,
                           key=route_key(api_key=obj.api_key, base_url=obj.base_url))


class McpServerForm(KeysWriteOnly):
    KEYS = ("bearer_token",)
    host = False  # set per request: whether the host's superuser is editing

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if not self.host:  # a stdio server is a command run on this server: the host's alone
            if cleaned.get("kind") == McpServer.Kind.STDIO or cleaned.get("command"):
                raise forms.ValidationError("Only the host's superusers add stdio MCP servers (they run a command "
                                            "on this server); a streamable HTTP server needs only its URL.")
        return cleaned


class McpServerInline(TenantScopedInlineMixin, admin.StackedInline):
    model = McpServer
    tenant_field = "qor__tenant"
    form = McpServerForm
    extra = 0
    fields = ["name", "kind", "url", "bearer_token", "command", "enabled", "min_trust", "listed"]
    readonly_fields = ["listed"]

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        formset.form = type("McpServerFormFor", (formset.form,), {"host": request.user.is_superuser})
        return formset

    # A stdio server runs a command on the host, with the host's arguments (a key among
    # them): a tenant admin neither sees one nor can ask for one (no kind, no command: what
    # they add is a streamable HTTP server), and their page of the Qor saves whatever stdio
    # servers the host gave it.
    def get_queryset(self, request):
        servers = super().get_queryset(request)
        return servers if request.user.is_superuser else servers.exclude(kind=McpServer.Kind.STDIO)

    def get_fields(self, request, obj=None):
        fields = list(super().get_fields(request, obj))
        return fields if request.user.is_superuser else [f for f in fields if f not in ("kind", "command")]

    @admin.display(description="tools")
    def listed(self, obj: McpServer) -> str:
        if not obj.pk or obj.tools_listed_at is None:
            return "not listed yet (on the next turn)"
        names = ", ".join(t.get("name", "") for t in obj.tools) or "none"
        return f"{names} (listed {obj.tools_listed_at:%Y-%m-%d %H:%M})"


@admin.register(Qor)
class QorAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    form = QorForm
    list_display = ["slug", "name", "tenant", "is_default", "summarizer_mode", "main_model"]
    list_filter = ["tenant", "summarizer_mode"]
    search_fields = ["slug", "name"]
    fieldsets = [
        (None, {"fields": ["tenant", "name", "slug", "is_default", "route_states"]}),
        ("Prompt", {"fields": ["system_prompt", "project_context", "project_folder", "tool_allowlist"]}),
        ("Main model", {"fields": ["main_base_url", "main_model", "main_num_ctx", "main_vision",
                                   "main_max_concurrency", "main_api_key"]}),
        ("Summarizer", {"fields": ["summarizer_mode", "compact_threshold", "summarizer_base_url",
                                    "summarizer_model", "summarizer_num_ctx", "summarizer_max_concurrency",
                                    "summarizer_api_key"]}),
        ("Heartbeat model", {"fields": ["heartbeat_base_url", "heartbeat_model", "heartbeat_num_ctx",
                                        "heartbeat_max_concurrency", "heartbeat_api_key"]}),
        ("Voice notes", {"fields": ["transcriber_base_url", "transcriber_model", "transcriber_api_key"]}),
    ]
    # Keys are the host's too: never shown, and only superusers set them.
    KEY_FIELDS = QorForm.KEYS
    readonly_fields = ["route_states"]

    @admin.display(description="model servers now")
    def route_states(self, obj: Qor) -> str:
        """Each role's own model server and whether it is cooling down after failures (the
        fallbacks' state is in their list below)."""
        if obj is None or not obj.pk:
            return "—"
        lines = []
        for role in ("main", "summarizer", "heartbeat"):
            base_url, model, _ = obj.route_target(role)
            if model:  # the key its calls send: a rate limit or a refusal cools that key
                key = route_key(api_key=role_api_key(obj, role), base_url=base_url)
                lines.append(f"{role}: {model} — {route_state(base_url=base_url, model=model, key=key)}")
        return "; ".join(lines) or "offline (no model configured)"
    # Model servers belong to the host: only superusers point a Qor at one (see
    # qorven.llm.routes; the host's key never follows a URL a tenant admin chose). So does
    # the project folder: a path on the server (qorven.agent.project).
    HOST_FIELDS = ("main_base_url", "summarizer_base_url", "heartbeat_base_url", "transcriber_base_url",
                   "project_folder", "main_max_concurrency", "summarizer_max_concurrency", "heartbeat_max_concurrency")

    def get_readonly_fields(self, request, obj=None):
        # Its tenant is fixed once made (TenantScopedAdminMixin): a Qor's sessions, memories,
        # bindings and beats name that tenant, and would be answered with another's prompt,
        # context and MCP servers.
        fields = list(super().get_readonly_fields(request, obj))
        return fields if request.user.is_superuser else [*fields, *self.HOST_FIELDS]

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if request.user.is_superuser:
            return fieldsets
        return [(name, {**options, "fields": [f for f in options["fields"] if f not in self.KEY_FIELDS]})
                for name, options in fieldsets]

    def get_inlines(self, request, obj):
        return [ModelFallbackInline, McpServerInline] if request.user.is_superuser else [McpServerInline]
