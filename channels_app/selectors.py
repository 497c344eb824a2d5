"""Reads of the edges' own data: channel bindings and identities."""
from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import OuterRef, Q, QuerySet, Subquery

from qorven.runtime.prepared_read import PreparedRead
from tenancy.models import Membership, Qor, Tenant

from .models import ChannelBinding, Identity


def telegram_secret_of(*, tenant: Tenant, qor: Qor, token: str) -> str:
    """The webhook secret of the Qor's binding for the bot with this token ("" when the
    bot is not bound to it): binding the bot again keeps it, and so updates that binding."""
    for credentials in ChannelBinding.objects.filter(tenant=tenant, qor=qor, kind=ChannelBinding.Kind.TELEGRAM) \
            .order_by("pk").values_list("credentials", flat=True):
        if isinstance(credentials, dict) and credentials.get("token") == token and credentials.get("secret"):
            return str(credentials["secret"])
    return ""


def bindings_by_verify_token(*, kind: str, token: str) -> QuerySet[ChannelBinding]:
    """The enabled bindings of `kind` whose handshake secret (WhatsApp's verify token) has
    the digest of `token`, read through its index: the caller still compares the secret.
    A handshake names no workspace, so this reads across them."""
    from .adapters.base import secret_digest

    # The index's own condition restated: SQLite uses a partial index only for a query that says it.
    return (ChannelBinding.objects.filter(~Q(verify_key=""), kind=kind, verify_key=secret_digest(token), enabled=True)
            .order_by()[:1])


def identities_of_person(*, tenant: Tenant, user: User, after_id: int = 0, limit: int = 500) -> list[Identity]:
    """The person's accounts on the tenant's channels (paired to them), by id after `after_id`."""
    return list(Identity.objects.filter(tenant=tenant, user=user, pk__gt=after_id).order_by("pk")[:limit])


# Read for every group message (compiled once: qorven.runtime.prepared_read): the paired
# identity with its user's current role, in the one statement the group path reads.
_paired_sender: PreparedRead[Identity] = PreparedRead(
    lambda tenant_id, channel, external_id: Identity.objects.filter(
        tenant_id=tenant_id, channel=channel, external_id=external_id,
        approval=Identity.Approval.APPROVED, user__isnull=False,
    ).annotate(member_role=Subquery(Membership.objects.filter(
        # As tenancy.access reads it: a membership of the tenant, of an account still active.
        tenant_id=OuterRef("tenant_id"), user_id=OuterRef("user_id"), user__is_active=True,
    ).order_by().values("role")[:1])).order_by()[:1],
    tenant_id=int, channel=str, external_id=str,
)


def paired_sender(*, tenant: Tenant, channel: str, external_id: str) -> Identity | None:
    """The sender's identity on the tenant's channel if it is paired (approved, with a
    user), None for anyone else. Its `member_role` is the user's role in the tenant now:
    None once they were removed from it or their account deactivated."""
    return _paired_sender.first(tenant_id=tenant.pk, channel=channel, external_id=external_id)


def account_paired(*, tenant: Tenant, channel: str, user: User, sender: str = "", chat: str = "") -> bool:
    """Whether an account of `user`'s on the channel is still paired to them: the one that
    wrote (`sender`, its id on the platform) when known, else the one whose chat `chat` is
    (where replies to the person go: the account's id or its reply target)."""
    rows = Identity.objects.filter(tenant=tenant, channel=channel, user=user, approval=Identity.Approval.APPROVED)
    return rows.filter(Q(external_id=sender) if sender else Q(external_id=chat) | Q(reply_target=chat)).exists()
