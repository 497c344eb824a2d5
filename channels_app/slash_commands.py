"""`/pair …` from a trusted surface: the owner approves or denies pairing codes in chat,
lists the paired accounts and revokes one."""
from __future__ import annotations

from sessions_app.models import Session
from tenancy.errors import NotFound
from tenancy.slash_registry import CommandContext, slash_command
from tenancy.trust import Trust, trust_allows

from .pairing import (
    MemberNotFound,
    NotPaired,
    member_by_username,
    paired_identity_get,
    pairing_approve,
    pairing_deny,
    pairing_paired,
    pairing_pending,
    sender_masked,
    sender_shown,
)
from .pairing_end import pairing_revoke

NOT_IN_A_GROUP = "/pair works only in your own chat with me, not in a group."
USAGE = ("Usage: /pair list | /pair approve CODE [me | USERNAME] | /pair deny CODE | /pair paired | "
         "/pair revoke #N (from /pair paired) | /pair revoke CHANNEL SENDER_ID")


# A sender's platform id is a phone number on WhatsApp and SMS: what is said here stays in
# the conversation the model reads, so chat names senders masked (channels_app.pairing).
@slash_command("pair", "owner only: /pair list, /pair approve CODE [me | USERNAME], /pair deny CODE, "
                       "/pair paired, /pair revoke #N or CHANNEL SENDER_ID")
def _pair(ctx: CommandContext) -> str:
    # A group's session is everyone's in it and no one's own (SPEC §3: the owner decides
    # from a trusted surface): it has no person to be `me` or to record as deciding, and
    # what is answered there is read by the whole group — pending codes included.
    if ctx.session.kind == Session.Kind.GROUP or ctx.session.user_id is None:
        return NOT_IN_A_GROUP
    if not trust_allows(ctx.trust, Trust.OWNER):
        return "Only the owner can manage pairing, from a trusted surface."
    action, _, rest = ctx.args.partition(" ")
    code, _, who = rest.strip().partition(" ")
    tenant, owner = ctx.session.tenant, ctx.session.user
    if action == "list":
        pending = pairing_pending(tenant=tenant)
        if not pending:
            return "No pending pairing requests."
        return "\n".join(f"{r.code} — {r.channel} {_shown(r.identity)}" for r in pending)
    if action == "paired":
        paired = pairing_paired(tenant=tenant)
        if not paired:
            return "No paired accounts."
        return "\n".join(f"#{i.pk} {i.channel} {sender_masked(i.external_id)} — {i.display_name or '-'} "
                         f"({i.user.get_username()})" for i in paired)
    if action == "revoke":
        return _revoke(ctx, channel=code.strip(), sender=who.strip())
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
            return f"Approved {identity.channel} sender {_shown(identity)}{linked}."
        identity = pairing_deny(tenant=tenant, code=code, by=owner, via=f"chat:{ctx.channel}")
        return f"Denied {identity.channel} sender {_shown(identity)}."
    except MemberNotFound:
        return f"{who.strip()} is not a member here: approve as me, or without a name for a new user."
    except NotFound:
        return f"No pending request with code {code.strip()}."


def _shown(identity) -> str:
    return sender_shown(display_name=identity.display_name, external_id=identity.external_id)


def _revoke(ctx: CommandContext, *, channel: str, sender: str) -> str:
    number = channel.removeprefix("#")
    by_number = not sender and number.isdigit()  # `#N`, as /pair paired numbers them
    if not by_number and (not channel or not sender):
        return USAGE
    try:
        identity = paired_identity_get(tenant=ctx.session.tenant, identity_id=int(number) if by_number else None,
                                       channel=channel, external_id=sender)
        revoked = pairing_revoke(tenant=ctx.session.tenant, identity_id=identity.pk, via=f"chat:{ctx.channel}")
    except NotPaired:
        return f"No paired account #{number}." if by_number else f"No paired {channel} account {sender}."
    return (f"Revoked {revoked.identity.channel} sender {_shown(revoked.identity)} (was paired to "
            f"{revoked.username}): what it sends is not answered; {revoked.messages} waiting message(s) ended, "
            f"{revoked.parts} reply part(s) not sent.")
