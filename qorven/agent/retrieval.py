"""What the prompt learns from the domain apps: memories for this message, usable skills."""
from __future__ import annotations

from django.contrib.auth.models import User

from memory_app.selectors import memory_search, skills_for
from tenancy.models import Qor, Tenant

MEMORIES_IN_PROMPT = 5
# A conversation digest can run to 1,500 characters; five of them would crowd the window.
# The memory_search tool returns the whole text when the model needs it.
MEMORY_CHARS_IN_PROMPT = 600


def memories_for(*, tenant: Tenant, qor: Qor, user: User | None, query: str) -> list[str]:
    if user is None:
        return []
    return [
        f"({m.type}) {_clip(' '.join(m.content.split()))}"
        for m in memory_search(tenant=tenant, qor=qor, user=user, query=query, limit=MEMORIES_IN_PROMPT)
    ]


def _clip(text: str) -> str:
    return text if len(text) <= MEMORY_CHARS_IN_PROMPT else text[: MEMORY_CHARS_IN_PROMPT - 1].rstrip() + "…"


def skills_for_prompt(*, tenant: Tenant, trust: str) -> list[tuple[str, str]]:
    return [(s.name, s.description) for s in skills_for(tenant=tenant, trust=trust)]
