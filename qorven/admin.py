from __future__ import annotations

from django.contrib import admin

from channels_app.models import ChannelBinding

from .admin_scoping import TenantScopedAdminMixin, TenantScopedInlineMixin, admin_tenant_ids
from .models import ApiToken, Membership, Qor, Tenant, Usage
from .selectors import tokens_spent_this_month


class MembershipInline(TenantScopedInlineMixin, admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class QorInline(TenantScopedInlineMixin, admin.StackedInline):
    model = Qor
    extra = 0
    fields = ["name", "slug", "is_default", "summarizer_mode"]
    show_change_link = True


class ChannelBindingInline(TenantScopedInlineMixin, admin.TabularInline):
    """A tenant's channel accounts. Credentials and webhook secrets are never rendered:
    only whether they are set (they are entered with `qorven bind`)."""

    model = ChannelBinding
    extra = 0
    fields = ["kind", "name", "qor", "lookup_key", "unpaired_response", "enabled", "secrets"]
    readonly_fields = ["secrets"]

    @admin.display(description="credentials")
    def secrets(self, obj: ChannelBinding) -> str:
        if obj.pk is None:
            return "set with `qorven bind`"
        keys = len(obj.credentials or {})
        parts = [f"{keys} credential{'s' if keys != 1 else ''} set (hidden)" if keys else "no credentials"]
        parts.append("webhook secret set (hidden)" if obj.webhook_secret else "no webhook secret")
        return "; ".join(parts)


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    tenant_field = ""
    tenant_admin_can_add = False
    tenant_admin_can_delete = False
    list_display = ["slug", "name", "timezone", "monthly_token_budget", "tokens_this_month", "created_at"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [QorInline, MembershipInline, ChannelBindingInline]

    @admin.display(description="tokens this month")
    def tokens_this_month(self, obj: Tenant) -> int:
        return tokens_spent_this_month(tenant=obj)

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if admin_tenant_ids(request.user) is not None:
            # The host sets the budget and the slug (config files and URLs refer to it).
            fields += ["slug", "monthly_token_budget"]
        return fields

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        if change and "timezone" in form.changed_data:
            from heartbeats_app.services import heartbeats_retime

            heartbeats_retime(tenant=obj)  # beats without their own timezone follow the tenant's

    def get_prepopulated_fields(self, request, obj=None):
        return {} if admin_tenant_ids(request.user) is not None else super().get_prepopulated_fields(request, obj)


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    list_display = ["tenant", "user", "role", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "tenant__slug"]
    autocomplete_fields = ["user"]


@admin.register(Qor)
class QorAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    list_display = ["slug", "name", "tenant", "is_default", "summarizer_mode", "main_model"]
    list_filter = ["tenant", "summarizer_mode"]
    search_fields = ["slug", "name"]
    fieldsets = [
        (None, {"fields": ["tenant", "name", "slug", "is_default"]}),
        ("Prompt", {"fields": ["system_prompt", "project_context", "tool_allowlist"]}),
        ("Main model", {"fields": ["main_base_url", "main_model", "main_num_ctx"]}),
        ("Summarizer", {"fields": ["summarizer_mode", "compact_threshold", "summarizer_base_url",
                                    "summarizer_model", "summarizer_num_ctx"]}),
        ("Heartbeat model", {"fields": ["heartbeat_base_url", "heartbeat_model", "heartbeat_num_ctx"]}),
    ]
    # Model servers belong to the host: only superusers point a Qor at one (see
    # qorven.llm.routes; the host's key never follows a URL a tenant admin chose).
    HOST_FIELDS = ("main_base_url", "summarizer_base_url", "heartbeat_base_url")

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        return fields if request.user.is_superuser else [*fields, *self.HOST_FIELDS]


@admin.register(ApiToken)
class ApiTokenAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    list_display = ["prefix", "user", "tenant", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["tenant"]
    readonly_fields = ["prefix", "digest", "created_at", "last_used_at"]
    exclude: list[str] = []

    def has_add_permission(self, request) -> bool:
        return False  # tokens are minted with `qorven token create`, which shows them once


@admin.register(Usage)
class UsageAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    list_display = ["day", "tenant", "qor", "role", "calls", "prompt_tokens", "completion_tokens"]
    list_filter = ["tenant", "role", "day"]
    date_hierarchy = "day"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
