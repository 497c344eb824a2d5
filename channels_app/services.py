"""Writes of the edges' own data: channel bindings, and a group chat's move to a new id."""
from __future__ import annotations

from django.db import transaction
from django.db.models import Q

from tenancy.models import Qor, Tenant

from .adapters import adapter_for
from .models import ChannelBinding, OutboundDelivery


class BindingError(Exception):
    pass


@transaction.atomic
def binding_create(
    *, tenant: Tenant, qor: Qor, kind: str, credentials: dict[str, str], name: str = "",
    unpaired_response: str | None = None, group_answers: str | None = None,
) -> ChannelBinding:
    """Create or update the Qor's binding for this platform account. `unpaired_response`
    and `group_answers` None keep what the binding has (a new one: a pairing code for
    unknown senders, and paired people only in groups)."""
    if qor.tenant_id != tenant.pk:
        raise BindingError("the Qor belongs to another tenant")
    adapter = adapter_for(kind)
    if adapter is None:
        raise BindingError(f"unknown channel kind {kind!r}")
    longest = ChannelBinding._meta.get_field("name").max_length  # SQLite would keep more, PostgreSQL refuse it
    if longest is not None and len(name) > longest:
        raise BindingError(f"--name is at most {longest} characters, got {len(name)}")
    missing = [k for k in adapter.required if not credentials.get(k)]
    if missing:
        raise BindingError(f"{kind} needs: {', '.join('--' + m.replace('_', '-') for m in missing)}")
    given = {k: v for k, v in credentials.items() if v}
    current = adapter.binding_to_update(qor=qor, given=given)
    kept = dict(current.credentials) if current is not None else {}
    clean = adapter.prepare_credentials({**kept, **given})
    problem = adapter.credentials_problem(clean)
    if problem:
        name, what = problem
        raise BindingError(f"--{name.replace('_', '-')} {what}")
    lookup = adapter.lookup_key(clean)
    existing = ChannelBinding.objects.filter(kind=kind, lookup_key=lookup).first()
    if existing is not None and existing.tenant_id != tenant.pk:
        raise BindingError("that platform account is already bound elsewhere")
    binding = existing or ChannelBinding(tenant=tenant, qor=qor, kind=kind, lookup_key=lookup)
    binding.qor = qor
    binding.name = name or binding.name or kind
    binding.credentials = {**binding.credentials, **clean}
    binding.verify_key = adapter.verify_key(binding.credentials)
    if unpaired_response is not None:
        binding.unpaired_response = unpaired_response
    if group_answers is not None:
        binding.group_answers = group_answers
    binding.enabled = True
    binding.save()
    # What Qorven made up in this call (a webchat's secret): shown once, by `qorven bind`.
    binding.generated = frozenset(k for k in clean if k not in given and k not in kept
                                  and k not in (existing.credentials if existing else {}))
    return binding


@transaction.atomic
def group_chat_migrate(*, binding: ChannelBinding, channel: str, old_chat: str, new_chat: str,
                       sep: str = "|") -> int:
    """A group chat the platform moved to a new id (a Telegram group upgraded to a
    supergroup): the binding's Qor's conversation of that group — its forum topics' too,
    `<chat><sep><topic>` — is keyed by the new id, and what still names the old chat as
    where an answer goes (parts waiting to be sent, questions waiting for their answer or
    for /retry) names the new one. One transaction; safe to run again, and either of the
    platform's two notices may come first. Returns how many sessions were moved."""
    from qorven.agent.gateway import turn_enqueue
    from sessions_app.models import Message
    from sessions_app.thread_moves import group_thread_move

    def renamed(target: str) -> str | None:
        if target == old_chat or target.startswith(old_chat + sep):
            return new_chat + target[len(old_chat):]
        return None

    moved = group_thread_move(tenant=binding.tenant, qor=binding.qor, channel=channel, old_thread=old_chat,
                              new_thread=new_chat, sep=sep)
    waiting = OutboundDelivery.objects.filter(
        tenant_id=binding.tenant_id, binding=binding, state=OutboundDelivery.State.PENDING
    ).filter(Q(target=old_chat) | Q(target__startswith=old_chat + sep)).order_by("pk")
    for part in waiting:
        OutboundDelivery.objects.filter(pk=part.pk).update(target=renamed(part.target))
    questions = Message.objects.filter(
        tenant_id=binding.tenant_id, session__in=[s.pk for s in moved.sessions], role=Message.Role.USER,
        answer_state__in=[Message.Answer.PENDING, Message.Answer.FAILED], metadata__binding=binding.pk,
    ).order_by("pk")
    for question in questions:
        target = renamed(str((question.metadata or {}).get("reply_target") or ""))
        if target is not None:
            Message.objects.filter(pk=question.pk).update(metadata={**question.metadata, "reply_target": target})
    if moved.waiting:  # a question folded in from a session started under the new id is answered here
        for session in moved.sessions:
            turn_enqueue(session=session)
    return len(moved.sessions)
