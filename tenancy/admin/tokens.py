"""The admin's API token pages: listed, revoked, re-dated; an owner's tokens are the
owner's (and the host's) to act on."""
from __future__ import annotations

from typing import ClassVar

from django.contrib import admin, messages
from django.utils import timezone

from ..admin_scoping import OwnerRankedAdminMixin, owners_off_limits
from ..models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(OwnerRankedAdminMixin, admin.ModelAdmin):
    list_display = ["prefix", "user", "tenant", "name", "created_at", "last_used_at", "expires_at", "revoked_at"]
    list_filter = ["tenant"]
    # Whose a token is, and that it was revoked, never change: a token moved onto another
    # member (an owner) would let whoever holds it act as them.
    readonly_fields = ["prefix", "digest", "tenant", "user", "created_at", "last_used_at", "revoked_at"]
    exclude: ClassVar[list[str]] = []
    actions = ["revoke"]

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and obj.expires_at is not None and obj.expires_at <= timezone.now():
            # Run out, it is as dead as a revoked one: a new end would set it (leaked, say) going again.
            fields.append("expires_at")
        return fields

    def has_add_permission(self, request) -> bool:
        return False  # tokens are minted with `qorven token create`, which shows them once

    # An owner's tokens are the owner's (and the host's) to revoke, delete or re-date, as
    # the owner's membership is: a workspace admin revoking one shuts the owner's scripts
    # out, and one clearing its end keeps working for good a token the owner meant to run
    # out. The admin still sees them listed, read-only: which tokens the workspace has out
    # is theirs to know, and to raise with the owner.
    person_fields = ("user",)

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke(self, request, queryset):
        from ..services import api_tokens_revoke

        live = list(queryset.filter(revoked_at__isnull=True).order_by().values_list("tenant_id", "user_id").distinct())
        off_limits = {tenant_id: owners_off_limits(request.user, tenant_id) for tenant_id, _ in live}
        if any(user_id in off_limits[tenant_id] for tenant_id, user_id in live):
            self.message_user(request, "Only an owner of the workspace revokes an owner's token: none was revoked. "
                                       "Choose the others again.", messages.ERROR)
            return
        revoked = api_tokens_revoke(tokens=queryset)
        self.message_user(request, f"Revoked {revoked} token(s).")
