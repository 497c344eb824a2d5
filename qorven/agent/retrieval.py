"""What the prompt learns from the domain apps: memories for this message, usable skills."""
from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from memory_app.person_memories import memory_line
from memory_app.selectors import memory_search, skills_for
from tenancy.models import Qor, Tenant
from tenancy.zones import person_zone, person_zone_of

MEMORIES_IN_PROMPT = 5
# A conversation digest can run to 1,500 characters; five of them would crowd the window.
# The memory_search tool returns the whole text when the model needs it.
MEMORY_CHARS_IN_PROMPT = 600
# A reminder that reached the person stays in view this long (to answer "did you remind
# me?"), then gives its place to what still matters; memory_search and /memories keep it.
DONE_REMINDERS_IN_PROMPT = timedelta(days=1)


def memories_for(*, tenant: Tenant, qor: Qor, user: User | None, query: str, held: bool = True,
                 own_zone: str | None = None) -> list[str]:
    """The person's memories that best match `query`, each on one line with its number
    and the date it was said (in the person's timezone), oldest first: facts change, and
    the model must be able to tell the one that holds now (prompt.MEMORIES_GUIDE) and to
    name the old one to correct (`remember`'s `replaces`). A reminder delivered more than
    DONE_REMINDERS_IN_PROMPT ago is left out. Not `held`: the person has no memory with
    the Qor (read with the turn's message: memory_app.selectors.memories_held), and no
    search is made. `own_zone`: the person's own timezone as read with the turn's message
    (tenancy.zones.person_zone_own_of; None: not read, read here when memories are found)."""
    if user is None or not held:
        return []
    found = memory_search(tenant=tenant, qor=qor, user=user, query=query, limit=MEMORIES_IN_PROMPT,
                          done_before=timezone.now() - DONE_REMINDERS_IN_PROMPT)
    if not found:
        return []
    zone = (person_zone(tenant=tenant, user_id=user.pk) if own_zone is None
            else person_zone_of(tenant=tenant, own=own_zone))
    found.sort(key=lambda m: (m.said_at, m.pk))
    return [memory_line(m, zone=zone, width=MEMORY_CHARS_IN_PROMPT) for m in found]


def skills_for_prompt(*, tenant: Tenant, trust: str) -> list[tuple[str, str]]:
    return [(s.name, s.description) for s in skills_for(tenant=tenant, trust=trust)]
