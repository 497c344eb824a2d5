"""`/pair …` from a trusted surface: the owner approves or denies pairing codes in chat."""
from __future__ import annotations

from tenancy.errors import NotFound
from tenancy.slash_registry import CommandContext, slash_command
from tenancy.trust import Trust, trust_allows

from .pairing import pairing_approve, pairing_deny, pairing_pending

USAGE = "Usage: /pair list | /pair approve CODE | /pair deny CODE"


@slash_command("pair", "owner only: /pair list, /pair approve CODE, /pair deny CODE")
def _pair(ctx: CommandContext) -> str:
    if not trust_allows(ctx.trust, Trust.OWNER):
        return "Only the owner can manage pairing, from a trusted surface."
    action, _, code = ctx.args.partition(" ")
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
            identity = pairing_approve(tenant=tenant, code=code, by=owner, via=f"chat:{ctx.channel}")
            return f"Approved {identity.channel} sender {identity.display_name or identity.external_id}."
        identity = pairing_deny(tenant=tenant, code=code, by=owner, via=f"chat:{ctx.channel}")
        return f"Denied {identity.channel} sender {identity.display_name or identity.external_id}."
    except NotFound:
        return f"No pending request with code {code.strip()}."
