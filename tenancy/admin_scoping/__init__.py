"""Tenant scoping for the Django admin.

Superusers (the host) see everything, as usual. A *tenant admin* — a staff user who is not
a superuser and holds an owner or admin Membership — sees and edits only the rows of the
tenants they administer: lists, change pages, foreign-key choices and list filters are
all narrowed to those tenants, and a row of another tenant is "not found", exactly like a
missing one. For such users, access to scoped models comes from the membership role, not
from Django model permissions; models that do not adopt the mixin keep Django's
permission checks (so a tenant admin does not see them unless granted). Once a row is
made, its tenant (and a model's `fixed_fields`) is shown on its change page, not edited, for
the host too. A field that takes a row's id offers a tenant admin the field's choices instead
when the list its lookup button opens is refused to them (the server's accounts).

Adopt it by putting `TenantScopedAdminMixin` (or `TenantScopedInlineMixin`) before
`admin.ModelAdmin` and setting `tenant_field` to the path from the model to its Tenant.

The package's parts: rights (who administers which tenants, whose owners they may act
for), offered (what a scoped page offers: choices, raw id fields, lookups, filters) and
mixins (the ModelAdmin and inline mixins).
"""
from __future__ import annotations

from .mixins import OwnerRankedAdminMixin, TenantScopedAdminMixin, TenantScopedInlineMixin
from .offered import ScopedRawIdWidget
from .rights import ADMIN_ROLES, admin_tenant_ids, linkable_people, owners_off_limits, owns_tenant, tenant_chosen

__all__ = [
    "ADMIN_ROLES", "OwnerRankedAdminMixin", "ScopedRawIdWidget", "TenantScopedAdminMixin", "TenantScopedInlineMixin",
    "admin_tenant_ids", "linkable_people", "owners_off_limits", "owns_tenant", "tenant_chosen",
]
