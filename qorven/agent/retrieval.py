"""What the prompt learns from the domain apps: memories for this message, usable skills."""
from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser

from memory_app.selectors import memory_search, skills_for
from qorven.models import Qor, Tenant

MEMORIES_IN_PROMPT = 5


def memories_for(*, tenant: Tenant, qor: Qor, user: AbstractBaseUser | None, query: str) -> list[str]:
    if user is None:
        return []
    return [
        f"({m.type}) {m.content}"
        for m in memory_search(tenant=tenant, qor=qor, user=user, query=query, limit=MEMORIES_IN_PROMPT)
    ]


def skills_for_prompt(*, tenant: Tenant, trust: str) -> list[tuple[str, str]]:
    return [(s.name, s.description) for s in skills_for(tenant=tenant, trust=trust)]
