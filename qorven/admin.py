from __future__ import annotations

from django.contrib import admin

from .models import ApiToken, Membership, Qor, Tenant, Usage
from .selectors import tokens_spent_this_month


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class QorInline(admin.StackedInline):
    model = Qor
    extra = 0
    fields = ["name", "slug", "is_default", "summarizer_mode"]
    show_change_link = True


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "timezone", "monthly_token_budget", "tokens_this_month", "created_at"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [QorInline, MembershipInline]

    @admin.display(description="tokens this month")
    def tokens_this_month(self, obj: Tenant) -> int:
        return tokens_spent_this_month(tenant=obj)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["tenant", "user", "role", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "tenant__slug"]
    autocomplete_fields = ["user"]


@admin.register(Qor)
class QorAdmin(admin.ModelAdmin):
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


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "user", "tenant", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["tenant"]
    readonly_fields = ["prefix", "digest", "created_at", "last_used_at"]
    exclude: list[str] = []

    def has_add_permission(self, request) -> bool:
        return False  # tokens are minted with `qorven token create`, which shows them once


@admin.register(Usage)
class UsageAdmin(admin.ModelAdmin):
    list_display = ["day", "tenant", "qor", "role", "calls", "prompt_tokens", "completion_tokens"]
    list_filter = ["tenant", "role", "day"]
    date_hierarchy = "day"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
