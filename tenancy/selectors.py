"""Reads of tenancy data. Foreign and missing rows raise the same NotFound."""
from __future__ import annotations

import hashlib
from datetime import timedelta

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from qorven.runtime.prepared_read import PreparedRead
from qorven.runtime.row_cache import RowCache

from .errors import NotFound
from .models import ApiToken, McpServer, Membership, ModelFallback, Qor, Tenant

# A Qor role's fallback routes: read on every model call, edited a few times a year.
model_fallbacks: RowCache[tuple[ModelFallback, ...]] = RowCache("model fallbacks")
# A Qor's MCP servers, read on every turn.
mcp_servers: RowCache[tuple[McpServer, ...]] = RowCache("MCP servers")


def tenant_get(*, slug: str) -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise NotFound(f"no tenant {slug!r}")
    return tenant


def _tenant_with_role(slug: str, user_id: int) -> QuerySet[Tenant]:
    from django.db.models import OuterRef, Subquery

    role = memberships_holding().filter(tenant_id=OuterRef("pk"), user_id=user_id).values("role")[:1]
    return Tenant.objects.filter(slug=slug).annotate(member_role=Subquery(role)).order_by()[:1]  # slugs are unique


# Read as every request of the chat page opens it, and a chat socket: compiled once.
_tenant_with_role_read: PreparedRead[Tenant] = PreparedRead(_tenant_with_role, slug=str, user_id=int)


def tenant_role_get(*, slug: str, user: User) -> tuple[Tenant | None, str | None]:
    """The workspace `slug` (None when there is none) and the user's role in it by a
    membership that lets them in now (memberships_holding: None for none), in one
    statement: for tenancy.access.surface_access_of_role, which decides as surface_access
    does from a membership read on its own."""
    tenant = _tenant_with_role_read.first(slug=slug, user_id=user.pk)
    return (tenant, tenant.member_role) if tenant is not None else (None, None)  # type: ignore[attr-defined]


def _user_with_role(tenant_id: int, username: str) -> QuerySet[User]:
    from django.contrib.auth import get_user_model
    from django.db.models import OuterRef, Subquery

    role = memberships_holding().filter(tenant_id=tenant_id, user_id=OuterRef("pk")).values("role")[:1]
    return get_user_model().objects.filter(username=username).annotate(member_role=Subquery(role)).order_by()[:1]


# Read for every message and page of a signed webchat visitor: compiled once.
_user_with_role_read: PreparedRead[User] = PreparedRead(_user_with_role, tenant_id=int, username=str)


def user_role_get(*, tenant: Tenant, username: str) -> tuple[User | None, str | None]:
    """The account `username` (None when there is none) and its role in `tenant` by a
    membership that lets it in now (memberships_holding: None for none), in one statement:
    for tenancy.access.surface_access_of_role, as tenant_role_get is for a workspace."""
    user = _user_with_role_read.first(tenant_id=tenant.pk, username=username)
    return (user, user.member_role) if user is not None else (None, None)  # type: ignore[attr-defined]


def tenant_only_slug() -> str | None:
    """The slug of the host's one workspace, or None when it has none or several: what a
    command run by the host takes when none is named (`qorven setup` after `make run`)."""
    slugs = list(Tenant.objects.order_by("pk").values_list("slug", flat=True)[:2])
    return slugs[0] if len(slugs) == 1 else None


# Read on every API request and page (compiled once: qorven.runtime.prepared_read).
_qor_by_slug: PreparedRead[Qor] = PreparedRead(
    lambda tenant_id, slug: Qor.objects.filter(tenant_id=tenant_id, slug=slug)[:1], tenant_id=int, slug=str)


def qor_get(*, tenant: Tenant, slug: str) -> Qor:
    qor = _qor_by_slug.first(tenant_id=tenant.pk, slug=slug)
    if qor is None:
        raise NotFound(f"no qor {slug!r}")
    return qor


def qor_slugs(*, tenant: Tenant) -> list[str]:
    """The slugs of the tenant's Qors, in order: what a command names when one is mistyped."""
    return list(Qor.objects.filter(tenant=tenant).order_by("slug").values_list("slug", flat=True))


def membership_get(*, tenant: Tenant, user: User) -> Membership:
    membership = Membership.objects.filter(tenant=tenant, user=user).first()
    if membership is None:
        raise NotFound("not a member of this tenant")
    return membership


def memberships_holding() -> QuerySet[Membership]:
    """The memberships that let someone in now: of an active account, in a workspace the
    host has not suspended. The one rule tenancy.access decides by; a read that folds it
    into a statement of its own (a turn's, a group message's) filters by this."""
    return Membership.objects.filter(user__is_active=True, tenant__suspended_at__isnull=True)


def tenant_serving_now(*, tenant_id: int) -> bool:
    """Whether the workspace is served now (not suspended by the host), read afresh: for
    work that began before a suspension and spends or sends after it (a turn's model
    failing, a task queued earlier). tenancy.access.tenant_serving reads a row as loaded."""
    return Tenant.objects.filter(pk=tenant_id, suspended_at__isnull=True).exists()


# Read for every message (compiled once).
_membership_active: PreparedRead[Membership] = PreparedRead(
    lambda tenant_id, user_id: memberships_holding().filter(tenant_id=tenant_id, user_id=user_id).order_by()[:1],
    tenant_id=int, user_id=int,
)


def membership_active(*, tenant: Tenant, user: User) -> Membership | None:
    """The user's membership of the tenant, if they still have one, their account is
    active and the workspace is not suspended: read for every message, so removal, role
    changes and a suspension apply at once."""
    return _membership_active.first(tenant_id=tenant.pk, user_id=user.pk)


def surfaces_own(*, tenant: Tenant, user: User) -> list[str]:
    """Where the person can read their whole chat besides the platforms, now: "web" when
    their account can sign in on the web page (it has a password), "tui" when it holds a
    live API token of this workspace (the terminal); none when they are no longer let in
    (tenancy.access). A person known only from a platform has neither."""
    from django.db.models import Q
    from django.db.models.functions import Now

    if not user.is_active or membership_active(tenant=tenant, user=user) is None:
        return []
    surfaces = ["web"] if user.has_usable_password() else []
    if ApiToken.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=Now()), tenant=tenant, user=user,
                               revoked_at__isnull=True).exists():
        surfaces.append("tui")
    return surfaces


def token_digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


# How stale a token's "last used" may get: writing it on every request would make each API
# call a write (on SQLite, a wait for the one write lock).
TOKEN_USE_RESOLUTION = timedelta(minutes=1)


def _live_token(digest: str):
    from django.db.models import OuterRef, Q, Subquery
    from django.db.models.functions import Now

    role = memberships_holding().filter(tenant=OuterRef("tenant"), user=OuterRef("user")).values("role")[:1]
    return (
        ApiToken.objects.select_related("tenant", "user")
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=Now()), digest=digest, revoked_at__isnull=True,
                user__is_active=True)
        .annotate(member_role=Subquery(role))[:1]
    )


# Read on every API request: compiled once (qorven.runtime.prepared_read).
_live_token_read: PreparedRead[ApiToken] = PreparedRead(_live_token, digest=str)


def api_token_authenticate(*, raw: str) -> ApiToken | None:
    """The live token for a raw bearer value, or None. The user must still be a member,
    of a workspace not suspended (memberships_holding): the token comes with
    `member_role`, the role of that membership, read in the same query (so what the
    request may do is decided from the membership as it is now)."""
    token = _live_token_read.first(digest=token_digest(raw))
    if token is None or token.member_role is None:  # type: ignore[attr-defined]  # annotated by the read
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= TOKEN_USE_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def usage_month(*, tenant: Tenant, month_of=None) -> list[dict]:
    """This month's usage of `tenant`, one row per (qor, role), with totals."""
    from django.db.models import Sum

    from .models import Usage

    day = month_of or timezone.localdate()
    return list(
        Usage.objects.filter(tenant=tenant, day__year=day.year, day__month=day.month)
        .values("qor__slug", "role")
        .annotate(
            calls=Sum("calls"), prompt_tokens=Sum("prompt_tokens"), completion_tokens=Sum("completion_tokens")
        )
        .order_by("qor__slug", "role")
    )


def tokens_spent_this_month(*, tenant: Tenant) -> int:
    return sum(row["prompt_tokens"] + row["completion_tokens"] for row in usage_month(tenant=tenant))


def budget_exhausted(*, tenant: Tenant) -> bool:
    """True when the tenant has a monthly token budget and has spent it."""
    if tenant.monthly_token_budget is None:
        return False
    return tokens_spent_this_month(tenant=tenant) >= tenant.monthly_token_budget


def model_fallbacks_read(*, qor: Qor, role: str) -> tuple[ModelFallback, ...]:
    """The fallback routes of one role of `qor` (which names its tenant), in order."""
    return model_fallbacks.get((qor.pk, role), lambda: tuple(ModelFallback.objects.filter(qor=qor, role=role))) or ()


def mcp_servers_read(*, qor: Qor) -> tuple[McpServer, ...]:
    """The MCP servers of `qor` (which names its tenant)."""
    return mcp_servers.get(qor.pk, lambda: tuple(McpServer.objects.filter(qor=qor))) or ()
