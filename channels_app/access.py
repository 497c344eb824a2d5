"""The trust a message carries: the sender's role in the workspace (tenancy.trust's one
mapping), capped by what the surface can prove about who sent it.

- Web, the API and the terminal sign the member in; Telegram, WhatsApp, Slack and Discord
  vouch for the sender's account. They carry the role's trust (for a paired account, no
  more than its identity's level, which the owner may lower in the admin).
- A signed webchat embed runs on a page outside Qorven: at most trusted.
- Email's From header can be forged: at most paired, or trusted when the inbound
  provider's verdict proves the sender (DKIM/SPF, see the email adapter). Never owner.
- SMS sender numbers can be spoofed: at most paired.

The sender's membership is read on every message, so a member removed from the workspace
is no longer answered on any surface and a role change applies at once.
"""
from __future__ import annotations

from tenancy.trust import Trust, lowest, role_trust

CAPS: dict[str, Trust] = {"webchat": Trust.TRUSTED, "email": Trust.TRUSTED, "sms": Trust.PAIRED}
PROOF_NEEDED = frozenset({"email"})  # surfaces whose sender is paired at most unless proven
UNPROVEN_CAP = Trust.PAIRED


def surface_trust(*, role: str, channel: str, proven: bool | None = None, identity_cap: str = Trust.OWNER) -> Trust:
    """The trust of a member with `role` speaking on `channel`; `proven` is the surface's
    verdict on the sender, where it needs one."""
    unproven = channel in PROOF_NEEDED and proven is not True
    return lowest(role_trust(role), CAPS.get(channel, Trust.OWNER), UNPROVEN_CAP if unproven else Trust.OWNER,
                  identity_cap)
