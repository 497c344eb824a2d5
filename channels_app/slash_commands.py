"""`/pair …` from a trusted surface: the owner approves or denies pairing codes in chat."""
from __future__ import annotations

from tenancy.errors import NotFound
from tenancy.slash_registry import CommandContext, slash_command
from tenancy.trust import Trust, trust_allows

from .pairing import MemberNotFound, member_by_username, pairing_approve, pairing_deny, pairing_pending

USAGE = "Usage: /pair list | /pair approve CODE [me | USERNAME] | /pair deny CODE"


@slash_command("pair", "owner only: /pair list, /pair approve CODE [me | USERNAME], /pair deny CODE")
def _pair(ctx: CommandContext) -> str:
    if not trust_allows(ctx.trust, Trust.OWNER):
        return "Only the owner can manage pairing, from a trusted surface."
    action, _, rest = ctx.args.partition(" ")
    code, _, who = rest.strip().partition(" ")
    tenant, owner = ctx.session.tenant, ctx.session.user
    if action == "list":
        pending = pairing_pending(tenant=tenant)
        if not pending:
            return "No pending pairing requests."
        return "\n".join(f"{r.code} — {r.channel} {r.identity.display_name or r.external_id}" for r in pending)
    if action not in ("approve", "deny") or not code.strip():
        return USAGE
    try:
        if action == "approve":
            # `me`: the owner's own account on that platform (the usual case); a username:
            # another member's; nothing: a new user for the sender.
            user = None
            if who.strip():
                user = owner if who.strip() == "me" else member_by_username(tenant=tenant, username=who.strip())
            identity = pairing_approve(tenant=tenant, code=code, user=user, by=owner, via=f"chat:{ctx.channel}")
            linked = f", linked to {identity.user.get_username()}" if user is not None else ""
            return f"Approved {identity.channel} sender {identity.display_name or identity.external_id}{linked}."
        identity = pairing_deny(tenant=tenant, code=code, by=owner, via=f"chat:{ctx.channel}")
        return f"Denied {identity.channel} sender {identity.display_name or identity.external_id}."
    except MemberNotFound:
        return f"{who.strip()} is not a member here: approve as me, or without a name for a new user."
    except NotFound:
        return f"No pending request with code {code.strip()}."
