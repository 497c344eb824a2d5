"""Reads of long-term memory, always scoped to (tenant, qor, user)."""
from __future__ import annotations

import re

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q

from qorven.models import Qor, Tenant

from .models import Memory

_WORD = re.compile(r"\w{3,}", re.UNICODE)


def memory_search(
    *, tenant: Tenant, qor: Qor, user: AbstractBaseUser | None, query: str, limit: int = 5
) -> list[Memory]:
    """The memories of this user with this Qor that best match `query`, best first.

    Matches any word of three letters or more and ranks by how many distinct query words
    a memory contains, newest first among equals.
    """
    words = sorted({w.casefold() for w in _WORD.findall(query)})[:12]
    if not words or limit <= 0:
        return []
    match = Q()
    for word in words:
        match |= Q(content__icontains=word)
    candidates = list(
        Memory.objects.filter(tenant=tenant, qor=qor, user=user).filter(match).order_by("-created_at")[:200]
    )
    scored = [(sum(w in m.content.casefold() for w in words), m) for m in candidates]
    scored.sort(key=lambda pair: pair[0], reverse=True)  # stable: newest first among equals
    return [m for _, m in scored[:limit]]


def skills_for(*, tenant: Tenant, trust: str) -> list:
    """Enabled learned skills a surface of this trust may use: shared ones and the tenant's."""
    from qorven.trust import trust_allows

    from .models import LearnedSkill

    skills = LearnedSkill.objects.filter(Q(tenant=tenant) | Q(tenant__isnull=True), enabled=True).order_by("name")
    return [s for s in skills if trust_allows(trust, s.min_trust)]
