"""Who administers which tenants in the Django admin, and whose rows they may act for."""
from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest

from ..models import Membership

ADMIN_ROLES = (Membership.Role.OWNER, Membership.Role.ADMIN)
_CACHE = "_qorven_admin_tenant_ids"


def admin_tenant_ids(user: Any) -> frozenset[int] | None:
    """The tenants `user` may administer in the admin: None means all (a superuser)."""
    if not getattr(user, "is_active", False) or not getattr(user, "is_staff", False):
        return frozenset()
    if user.is_superuser:
        return None
    cached = getattr(user, _CACHE, None)
    if cached is None:
        cached = frozenset(
            # A workspace the host suspended is administered by the host alone until resumed.
            Membership.objects.filter(user=user, role__in=ADMIN_ROLES, tenant__suspended_at__isnull=True)
            .values_list("tenant_id", flat=True)
        )
        setattr(user, _CACHE, cached)  # per request: the user object lives as long as the request
    return cached


def owns_tenant(actor: Any, tenant_id: int | None) -> bool:
    """Whether `actor` may make, change or remove the tenant's owners in the admin: the
    host, and the tenant's owners (a workspace admin manages members and admins only)."""
    if admin_tenant_ids(actor) is None:
        return True
    if tenant_id is None:  # a workspace not made yet has no owners
        return False
    return Membership.objects.filter(tenant_id=tenant_id, user=actor, role=Membership.Role.OWNER).exists()


def owners_off_limits(actor: Any, tenant_id: int | None) -> frozenset[int]:
    """The owners of the tenant `actor` may not act for in the admin (link a sender to,
    change the sender of): none for the host and for the tenant's owners; every owner for
    a workspace admin, who manages members and admins but is not an owner. None for a row
    of no tenant (`tenant_id_of` found none): it has no owners."""
    if admin_tenant_ids(actor) is None or tenant_id is None:
        return frozenset()
    owners = frozenset(Membership.objects.filter(tenant_id=tenant_id, role=Membership.Role.OWNER)
                       .values_list("user_id", flat=True))
    return frozenset() if actor.pk in owners else owners


def linkable_people(actor: Any, tenant_ids: Any) -> QuerySet:
    """The people `actor` may tie a row of one of `tenant_ids` to in the admin (link a
    sender to, give a memory or a beat to): its members, but for a workspace admin who is
    not an owner there, its owners."""
    allowed = Q(pk__in=[])
    for tenant_id in tenant_ids:
        allowed |= Q(memberships__tenant_id=tenant_id) & ~Q(pk__in=owners_off_limits(actor, tenant_id))
    return get_user_model().objects.filter(allowed).distinct()


def tenant_chosen(request: HttpRequest, tenants: frozenset[int]) -> int | None:
    """The workspace of the row an add page makes, when it is known: the one posted or put
    in the page's address (of those `tenants` the admin administers), else their only one."""
    raw = (request.POST if request.method == "POST" else request.GET).get("tenant")
    if not raw:
        return next(iter(tenants)) if len(tenants) == 1 else None
    try:
        tenant_id = int(raw)
    except (TypeError, ValueError):
        return None
    return tenant_id if tenant_id in tenants else None


def tenant_id_of(obj: Model, tenant_field: str) -> int | None:
    if not tenant_field:
        return obj.pk
    *path, last = tenant_field.split("__")
    row: Model | None = obj
    for step in path:
        row = getattr(row, step, None)
        if row is None:
            return None
    return getattr(row, f"{last}_id", None)
