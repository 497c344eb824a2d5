"""Pairing: an unknown sender gets a 6-digit code and never reaches the model until the
owner approves it. Approvals are per channel (telegram:42 is not discord:42)."""
from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone
from django.utils.text import slugify

from qorven.runtime.prepared_read import PreparedRead
from tenancy.errors import NotFound
from tenancy.models import Membership, Tenant
from tenancy.selectors import memberships_holding
from tenancy.trust import Trust

from .models import Identity, PairingRequest

logger = logging.getLogger(__name__)

MAX_WRONG_CODES = 5
LOCK_FOR = timedelta(hours=1)


class PairingError(Exception):
    pass


@dataclass(frozen=True)
class PairingOutcome:
    """What an unknown sender's message led to: the code to tell them, or silence."""

    request: PairingRequest | None
    new_code: bool
    locked: bool


# Read for every platform message (compiled once: qorven.runtime.prepared_read), with the
# sender's user and that user's role in the tenant now (`member_role`, as
# tenancy.selectors.memberships_holding reads it: None once they left, their account was
# deactivated or the workspace suspended), so the access rule needs no read of its own.
_identity: PreparedRead[Identity] = PreparedRead(
    lambda tenant_id, channel, external_id: Identity.objects.select_related("user").filter(
        tenant_id=tenant_id, channel=channel, external_id=external_id
    ).annotate(member_role=Subquery(memberships_holding().filter(
        tenant_id=OuterRef("tenant_id"), user_id=OuterRef("user_id")).order_by().values("role")[:1])
    ).order_by()[:1],  # unique: no order (the model's goes through the tenant's table)
    tenant_id=int, channel=str, external_id=str,
)


def identity_get_or_create(*, tenant: Tenant, channel: str, external_id: str, display_name: str) -> Identity:
    """The sender's identity on the channel (its user read with it, and the user's
    membership role now as `member_role` when it was read, not created), created unknown
    the first time they write."""
    identity = _identity.first(tenant_id=tenant.pk, channel=channel, external_id=external_id)
    if identity is not None:
        return identity
    try:
        with transaction.atomic():
            return Identity.objects.create(
                tenant=tenant, channel=channel, external_id=external_id, display_name=display_name[:200]
            )
    except IntegrityError:
        return Identity.objects.get(tenant=tenant, channel=channel, external_id=external_id)


@transaction.atomic
def pairing_request_for(*, identity: Identity, text: str) -> PairingOutcome:
    """Issue (or re-use) the sender's pending code. Repeating before approval does not mint
    new codes. A sender who keeps sending codes that are not theirs is locked out for an
    hour after five tries."""
    now = timezone.now()
    pending = (
        PairingRequest.objects.select_for_update()
        .filter(identity=identity, state__in=[PairingRequest.State.PENDING, PairingRequest.State.LOCKED])
        .order_by("-created_at")
        .first()
    )
    if pending is not None and pending.state == PairingRequest.State.LOCKED:
        if pending.locked_until and pending.locked_until > now:
            return PairingOutcome(pending, new_code=False, locked=True)
        pending.state, pending.attempts, pending.locked_until = PairingRequest.State.PENDING, 0, None
        pending.save(update_fields=["state", "attempts", "locked_until", "updated_at"])
    if pending is not None and pending.expires_at <= now:
        pending.state = PairingRequest.State.EXPIRED
        pending.save(update_fields=["state", "updated_at"])
        pending = None
    if pending is not None:
        guess = text.strip()
        if guess.isdigit() and len(guess) == 6 and guess != pending.code:
            pending.attempts += 1
            fields = ["attempts", "updated_at"]
            if pending.attempts >= MAX_WRONG_CODES:
                pending.state, pending.locked_until = PairingRequest.State.LOCKED, now + LOCK_FOR
                fields += ["state", "locked_until"]
            pending.save(update_fields=fields)
            return PairingOutcome(pending, new_code=False, locked=pending.state == PairingRequest.State.LOCKED)
        return PairingOutcome(pending, new_code=False, locked=False)
    request = PairingRequest.objects.create(
        tenant=identity.tenant, identity=identity, channel=identity.channel, external_id=identity.external_id,
        code=_fresh_code(identity.tenant), expires_at=now + timedelta(seconds=settings.QORVEN_PAIRING_TTL),
    )
    return PairingOutcome(request, new_code=True, locked=False)


def _fresh_code(tenant: Tenant) -> str:
    for _ in range(20):
        code = f"{secrets.randbelow(1_000_000):06d}"
        if not PairingRequest.objects.filter(tenant=tenant, code=code, state=PairingRequest.State.PENDING).exists():
            return code
    raise PairingError("could not find a free pairing code")


# The owner decides on these; a lock (the sender guessed too often) stops only the sender.
DECIDABLE = (PairingRequest.State.PENDING, PairingRequest.State.LOCKED)


def pairing_pending(*, tenant: Tenant) -> list[PairingRequest]:
    return list(
        PairingRequest.objects.select_related("identity")
        .filter(tenant=tenant, state__in=DECIDABLE, expires_at__gt=timezone.now())
        .order_by("created_at")
    )


def pairing_paired(*, tenant: Tenant) -> list[Identity]:
    """The platform accounts of `tenant` that speak for a person now (approved, linked),
    with their person, by channel and sender id."""
    return list(Identity.objects.select_related("user").filter(
        tenant=tenant, approval=Identity.Approval.APPROVED, user__isnull=False).order_by("channel", "external_id"))


class NotPaired(NotFound):
    """No paired account of the tenant is that one (missing, not paired, or another
    tenant's: one error for all)."""


def paired_identity_get(*, tenant: Tenant, identity_id: int | None = None, channel: str = "",
                        external_id: str = "", lock: bool = False) -> Identity:
    """A paired account of `tenant`, by its id or by (channel, sender id); `lock` holds its
    row until the transaction ends. Raises NotPaired otherwise."""
    rows = Identity.objects.select_related("user").filter(
        tenant=tenant, approval=Identity.Approval.APPROVED, user__isnull=False)
    if identity_id is not None:
        rows = rows.filter(pk=identity_id)
        what = f"#{identity_id}"
    else:
        rows = rows.filter(channel=channel, external_id=external_id)
        what = f"{channel}:{external_id}"
    identity = (rows.select_for_update(of=("self",)) if lock else rows).order_by().first()
    if identity is None:
        raise NotPaired(f"no paired account {what} in {tenant.slug}")
    return identity


def _pending_by_code(tenant: Tenant, code: str) -> PairingRequest:
    request = (
        PairingRequest.objects.select_for_update()
        .select_related("identity")
        .filter(tenant=tenant, code=code.strip(), state__in=DECIDABLE, expires_at__gt=timezone.now())
        .first()
    )
    if request is None:
        raise NotFound(f"no pending pairing request with code {code!r}")
    return request


@transaction.atomic
def pairing_approve(
    *, tenant: Tenant, code: str, user: User | None = None, by: User | None = None,
    via: str = "cli",
) -> Identity:
    """Approve the sender the code was issued to, linking them to `user` (a member of the
    tenant; made a member if needed) or to a new user made for that sender."""
    request = _pending_by_code(tenant, code)
    identity = request.identity
    if user is None:
        user = _user_for_sender(identity)
    Membership.objects.get_or_create(tenant=tenant, user=user)
    identity.user = user
    identity.approval = Identity.Approval.APPROVED
    identity.trust_level = Trust.OWNER  # no cap of its own: the member's current role decides
    identity.save(update_fields=["user", "approval", "trust_level", "updated_at"])
    request.state = PairingRequest.State.APPROVED
    request.decided_by, request.decided_at, request.decided_via = by, timezone.now(), via
    request.save(update_fields=["state", "decided_by", "decided_at", "decided_via", "updated_at"])
    logger.info("pairing approved: %s identity %s -> user %s (via %s)", identity.channel, identity.pk, user.pk, via)
    return identity


@transaction.atomic
def pairing_deny(*, tenant: Tenant, code: str, by: User | None = None, via: str = "cli") -> Identity:
    request = _pending_by_code(tenant, code)
    request.state = PairingRequest.State.DENIED
    request.decided_by, request.decided_at, request.decided_via = by, timezone.now(), via
    request.save(update_fields=["state", "decided_by", "decided_at", "decided_via", "updated_at"])
    identity = request.identity
    identity.approval = Identity.Approval.DENIED
    identity.save(update_fields=["approval", "updated_at"])
    return identity


class MemberNotFound(NotFound):
    """No member of the tenant has that username (users of other tenants are not found either)."""


def member_by_username(*, tenant: Tenant, username: str) -> User:
    """A member of `tenant` to link a sender to."""
    membership = Membership.objects.select_related("user").filter(tenant=tenant, user__username=username).first()
    if membership is None:
        raise MemberNotFound(username)
    return membership.user


def tenant_members(*, tenant: Tenant) -> list[User]:
    """The members of `tenant`, by username: whom a sender may be linked to."""
    return [m.user for m in Membership.objects.select_related("user").filter(tenant=tenant)
            .order_by("user__username")]


def _user_for_sender(identity: Identity) -> User:
    User = get_user_model()
    # Named by the sender's name, else the last digits of their id: a username is shown in
    # chat (/pair paired), and a whole phone number there would be in the model's window.
    who = identity.display_name or identity.external_id[-4:]
    base = slugify(f"{identity.channel}-{who}")[:120] or identity.channel
    name = base
    for n in range(2, 1000):
        if not User.objects.filter(username=name).exists():
            break
        name = f"{base}-{n}"
    user = User.objects.create(username=name, first_name=(identity.display_name or "")[:150])
    user.set_unusable_password()
    user.save(update_fields=["password"])
    return user


def sender_masked(external_id: str) -> str:
    """A platform's id for a sender as chat shows it: its last four characters (a WhatsApp
    or SMS id is a phone number, an email one an address). What is said in chat stays in
    the conversation and reaches the model's window; the CLI and the admin show it whole."""
    if "@" in external_id:  # an address: its first letter and its domain
        local, _, domain = external_id.rpartition("@")
        return f"{local[:1]}…@{domain}"
    return f"…{external_id[-4:]}" if len(external_id) > 4 else external_id


def sender_shown(*, display_name: str, external_id: str) -> str:
    """A sender as the owner's chat names them: their name, else their masked id."""
    return display_name or sender_masked(external_id)


def pairing_code_message(code: str) -> str:
    return (
        f"Hi! I don't know you yet. Your pairing code is {code}. Ask my owner to approve it; "
        "after that, just write again."
    )
