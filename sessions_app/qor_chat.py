"""A Qor of the tenant's, named by its slug, with a member's active canonical session with
it: the one read a message posted to the API starts from (the Qor and the session were a
statement each)."""
from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import FilteredRelation, Q

from qorven.runtime.prepared_read import PreparedRead
from tenancy.errors import NotFound
from tenancy.models import Qor, Tenant

from .models import Session

# Compiled once (qorven.runtime.prepared_read): the Qor, and its LEFT JOIN to the member's
# active canonical session (at most one: session_one_active_canonical).
_qor_with_chat: PreparedRead[Qor] = PreparedRead(
    lambda tenant_id, slug, user_id: Qor.objects.filter(tenant_id=tenant_id, slug=slug).annotate(
        canonical_chat=FilteredRelation("sessions", condition=Q(
            sessions__tenant_id=tenant_id, sessions__user_id=user_id,
            sessions__kind=Session.Kind.CANONICAL, sessions__state=Session.State.ACTIVE,
        )),
    ).select_related("canonical_chat").order_by()[:1],  # one Qor a slug (qor_unique_slug): no ordering's join
    tenant_id=int, slug=str, user_id=int,
)


def qor_chat_get(*, tenant: Tenant, slug: str, user: User) -> tuple[Qor, Session | None]:
    """The tenant's Qor `slug` (NotFound for a missing or foreign one, alike, as
    tenancy.selectors.qor_get) and the user's active canonical session with it, or None
    before their first message (an archived one is never it). Canonical mode only: a
    legacy session is keyed by its surface (sessions_app.services.resolve.session_resolve)."""
    qor = _qor_with_chat.first(tenant_id=tenant.pk, slug=slug, user_id=user.pk)
    if qor is None:
        raise NotFound(f"no qor {slug!r}")
    session: Session | None = getattr(qor, "canonical_chat", None)
    return qor, session
