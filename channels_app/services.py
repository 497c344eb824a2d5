"""Writes of the edges' own data: channel bindings."""
from __future__ import annotations

from django.db import transaction

from tenancy.models import Qor, Tenant

from .adapters import adapter_for
from .models import ChannelBinding


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
