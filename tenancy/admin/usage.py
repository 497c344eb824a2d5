"""The admin's model usage pages: calls and tokens per day, read-only."""
from __future__ import annotations

from django.contrib import admin

from ..admin_scoping import TenantScopedAdminMixin
from ..models import Usage


@admin.register(Usage)
class UsageAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    list_display = ["day", "tenant", "qor", "role", "route", "calls", "prompt_tokens", "completion_tokens"]
    list_filter = ["tenant", "role", "day"]
    date_hierarchy = "day"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
