"""The one access rule: what a person may do on a surface is decided here, from their
*current* membership, on every entry point — each platform message, API call, socket
connect, page or terminal message and webchat message. Nothing copies a role elsewhere, so
a member removed from the workspace is refused on every surface at once and a role change
(down or up) applies to the next message.

The trust a message carries is the sender's role (tenancy.trust's one mapping) capped by
what the surface can prove about who sent it, and by the account's own cap:

- Web, the API and the terminal sign the member in; Telegram, WhatsApp, Slack and Discord
  vouch for the sender's account. They carry the role's trust (a paired account no more
  than its identity's cap, which the owner may lower in the admin; owner = no cap).
- A signed webchat embed runs on a page outside Qorven: at most trusted.
- Email's From header can be forged: at most paired, or trusted when the inbound
  provider's verdict proves the sender (DKIM/SPF, see the email adapter). Never owner.
- SMS sender numbers can be spoofed: at most paired.

A workspace the host has suspended (`Tenant.suspended_at`: an unpaid bill, say) lets
nobody in: its memberships do not hold (tenancy.selectors.memberships_holding), so every
surface refuses its people as it refuses someone removed — but quietly, with nothing
deleted and nothing told, and all of it back as it was on resume. Entry points that serve
someone with no membership to read (a webchat's anonymous visitor, a platform's stranger,
a heartbeat) ask `tenant_serving`.
"""
from __future__ import annotations

from django.contrib.auth.models import User

from .models import Tenant
from .selectors import membership_active
from .trust import Trust, lowest, role_trust

# What someone refused for having left (removed, or their account deactivated) is told, on
# every surface that can tell them: the terminal, and a paired platform account.
ACCESS_LOST_NOTICE = "You no longer have access to this workspace."

CAPS: dict[str, Trust] = {"webchat": Trust.TRUSTED, "email": Trust.TRUSTED, "sms": Trust.PAIRED}
PROOF_NEEDED = frozenset({"email"})  # surfaces whose sender is paired at most unless proven
UNPROVEN_CAP = Trust.PAIRED


def tenant_serving(tenant: Tenant) -> bool:
    """Whether the workspace is served (not suspended by the host), as `tenant` was read:
    the caller reads it with what it serves (the binding of a webhook, a beat's run)."""
    return tenant.suspended_at is None


def surface_access(
    *, tenant: Tenant, user: User | None, surface: str, proven: bool | None = None,
    cap: str = Trust.OWNER,
) -> Trust | None:
    """The trust of `user` speaking on `surface` now, or None when they may not: no user,
    an inactive account, no membership of `tenant` (any more), or the workspace is
    suspended. `proven` is the surface's
    verdict on the sender where it needs one; `cap` the account's own cap."""
    if user is None or not user.is_active:
        return None
    membership = membership_active(tenant=tenant, user=user)
    if membership is None:
        return None
    return surface_trust(role=membership.role, surface=surface, proven=proven, cap=cap)


def surface_access_of_role(
    *, user: User | None, role: str | None, surface: str, proven: bool | None = None, cap: str = Trust.OWNER,
) -> Trust | None:
    """`surface_access`, for a caller that read the user's current role in its own
    statement as tenancy.selectors.memberships_holding reads it (None: no membership that
    holds), instead of a read of its own: the same rule, one round trip fewer."""
    if user is None or not user.is_active or role is None:
        return None
    return surface_trust(role=role, surface=surface, proven=proven, cap=cap)


def surface_trust(*, role: str, surface: str, proven: bool | None = None, cap: str = Trust.OWNER) -> Trust:
    """The rule itself, for a role already read from the current membership."""
    unproven = surface in PROOF_NEEDED and proven is not True
    return lowest(role_trust(role), CAPS.get(surface, Trust.OWNER), UNPROVEN_CAP if unproven else Trust.OWNER, cap)
